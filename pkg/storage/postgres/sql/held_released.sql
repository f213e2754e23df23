-- Hand events of a held claim back untouched (the broker, not the event,
-- failed): due at once, and after their created_at, so that the claims find
-- them in the due index although they lie behind the relay's claim
-- position (see release.sql). Rows found as in held_delivered.sql.
UPDATE {{table}} AS t
SET available_at = greatest(statement_timestamp(), t.created_at + interval '1 microsecond'),
    updated_at = statement_timestamp()
FROM unnest($1::tid[], $2::uuid[]) AS f(row_id, event_id)
WHERE {{row_match}} AND t.status = 'PENDING'
  AND t.created_at BETWEEN $3 AND $4 -- see mark_delivered.sql
