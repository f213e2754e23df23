-- The event types with the most PENDING rows: which producer or consumer is
-- behind. $1 is how many to return.
SELECT event_type, count(*),
       (extract(epoch FROM now() - min(created_at)) * 1000000)::bigint
FROM {{table}}
WHERE status = 'PENDING'
GROUP BY event_type
ORDER BY count(*) DESC, event_type
LIMIT $1
