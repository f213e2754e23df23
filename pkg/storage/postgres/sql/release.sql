-- Hand events of one lease back untouched: the broker, not the event, failed.
-- Due at once (dueAgainRules in queries.go), and written by this
-- transaction, so that the claim frontier meets the rows again.
UPDATE {{table}} AS t
SET status = 'PENDING', available_at = {{due_now}}, {{handed_back}}, locked_by = NULL, locked_at = NULL,
    updated_at = statement_timestamp()
WHERE t.event_id = ANY($3::uuid[])
  AND t.status = 'DELIVERING' AND t.locked_by = $1 AND t.locked_at = ANY($2::timestamptz[])
  AND t.created_at BETWEEN $4 AND $5 -- see mark_delivered.sql
