-- Hand events of one lease back untouched: the broker, not the event, failed.
UPDATE {{table}}
SET status = 'PENDING', locked_by = NULL, locked_at = NULL, updated_at = now()
WHERE event_id = ANY($3::uuid[])
  AND status = 'DELIVERING' AND locked_by = $1 AND locked_at = ANY($2::timestamptz[])
