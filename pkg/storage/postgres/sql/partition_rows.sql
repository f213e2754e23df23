-- The rows of a partition ({{partition}}) about to be dropped, by status,
-- for the report: one scan, without locks, once in the partition's life.
SELECT status, count(*)
FROM {{partition}}
GROUP BY status
