-- The event types with the most PENDING rows, which producer or consumer is
-- behind, with the age of each one's oldest PENDING row at the snapshot's
-- instant (the first argument). The second is how many to return.
SELECT event_type, COUNT(*), TIMESTAMPDIFF(MICROSECOND, MIN(created_at), CAST(? AS DATETIME(6)))
FROM {{table}}
WHERE status = 'PENDING'
GROUP BY event_type
ORDER BY COUNT(*) DESC, event_type
LIMIT ?
