-- The periods of rows waiting in the default partition ({{partition}}) that
-- a partition could hold: finite created_at before $2 (now + ahead). $1 is
-- 'day' or 'hour'; periods in UTC, oldest first.
SELECT DISTINCT date_trunc($1, created_at, 'UTC') AS start
FROM {{partition}}
WHERE isfinite(created_at) AND created_at < $2
ORDER BY start
LIMIT 1000
