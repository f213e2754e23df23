-- Hand events read from the write-ahead log to the claims, attempts
-- unchanged: an earlier event holds their key, and the ordered claims
-- deliver a key's events in order. Due at once (dueAgainRules in
-- queries.go), in the due index, where the claims look. Rows found and
-- guarded as in record_delivered.sql.
UPDATE {{table}} AS t
SET available_at = {{due_now}}, {{handed_back}}, updated_at = statement_timestamp()
FROM unnest($1::uuid[], $2::timestamptz[]) AS f(event_id, created_at)
WHERE t.event_id = f.event_id AND {% if .ExactCreated %}t.created_at = f.created_at{% else %}true{% end %}
  AND t.status = 'PENDING' AND t.available_at <= t.created_at
