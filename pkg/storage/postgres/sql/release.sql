-- Hand events of one lease back untouched: the broker, not the event, failed.
-- available_at = now() puts them where claims look for rows that became
-- PENDING again (the due index), since they lie behind the relay's claim
-- position.
UPDATE {{table}}
SET status = 'PENDING', available_at = now(), locked_by = NULL, locked_at = NULL, updated_at = now()
WHERE event_id = ANY($3::uuid[])
  AND status = 'DELIVERING' AND locked_by = $1 AND locked_at = ANY($2::timestamptz[])
  AND created_at BETWEEN $4 AND $5 -- see mark_delivered.sql
