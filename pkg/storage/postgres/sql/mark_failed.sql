-- Settle failed events of one lease: count the attempt, keep the error, and
-- either schedule the retry or bury the event.
UPDATE {{table}} AS t
SET status = CASE WHEN f.dead THEN 'DEAD' ELSE 'PENDING' END,
    attempts = t.attempts + 1,
    last_error = f.error,
    available_at = CASE WHEN f.dead THEN t.available_at
                        ELSE now() + f.delay_us * interval '1 microsecond' END,
    locked_by = NULL, locked_at = NULL, updated_at = now()
FROM unnest($3::uuid[], $4::text[], $5::bool[], $6::bigint[]) AS f(event_id, error, dead, delay_us)
WHERE t.event_id = f.event_id
  AND t.status = 'DELIVERING' AND t.locked_by = $1 AND t.locked_at = ANY($2::timestamptz[])
  AND t.created_at BETWEEN $7 AND $8 -- see mark_delivered.sql
