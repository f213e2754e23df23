-- Hand events of a held claim back untouched (the broker, not the event,
-- failed), due at once (see dueAgainRules in postgres.go). Rows found as in
-- held_delivered.sql.
UPDATE {{table}} AS t
SET available_at = {{due_now}}, {{handed_back}}, updated_at = statement_timestamp()
WHERE {{rows}} AND t.status = 'PENDING'
  AND t.created_at BETWEEN $3 AND $4 -- see mark_delivered.sql
