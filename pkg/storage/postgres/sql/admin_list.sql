-- The newest rows, optionally of one status ($1) and event type ($2), at most
-- $3. Payload and headers are left out: listing is for finding rows, and
-- payloads can be large. With a status, the planner can read the PENDING
-- rows in created_at order from their partial index.
SELECT event_id, event_type, partition_key, status, attempts, last_error,
       available_at, locked_by, locked_at, delivered_at, created_at, updated_at, seq,
       (extract(epoch FROM now() - created_at) * 1000000)::bigint
FROM {{table}}
WHERE ($1::text IS NULL OR status = $1::text)
  AND ($2::text IS NULL OR event_type = $2::text)
ORDER BY created_at DESC, seq DESC NULLS LAST
LIMIT $3
