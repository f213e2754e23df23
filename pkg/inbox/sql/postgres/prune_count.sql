-- How many records prune would delete: older than $1 microseconds, and of
-- consumer $2 when the filter is set.
SELECT count(*) FROM {{table}}
WHERE processed_at < now() - $1::bigint * interval '1 microsecond' {{consumer_filter}}
