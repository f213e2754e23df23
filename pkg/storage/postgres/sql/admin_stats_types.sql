-- The event types with the most PENDING rows: which producer or consumer is
-- behind. $1 is how many to return. The count is every PENDING row; the age
-- is that of the type's oldest due one (available_at has passed), as the
-- backlog's oldest pending age, and 0 when none is due: an event scheduled
-- for later is not late.
SELECT event_type, count(*),
       coalesce(extract(epoch FROM now() - min(created_at) FILTER (WHERE available_at <= now())) * 1000000, 0)::bigint
FROM {{table}}
WHERE status = 'PENDING'
GROUP BY event_type
ORDER BY count(*) DESC, event_type
LIMIT $1
