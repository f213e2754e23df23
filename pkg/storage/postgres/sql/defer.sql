-- Hand events read from the write-ahead log to the claims, attempts
-- unchanged: an earlier event holds their key, and the ordered claims
-- deliver a key's events in order. available_at after created_at puts
-- them in the due index, where the claims look.
UPDATE {{table}}
SET available_at = greatest(now(), created_at + interval '1 microsecond'), updated_at = now()
WHERE event_id = ANY($1::uuid[])
  AND status = 'PENDING' AND available_at <= created_at
  AND created_at BETWEEN $2 AND $3 -- see mark_delivered.sql
