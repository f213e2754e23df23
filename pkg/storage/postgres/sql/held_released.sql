-- Hand events of a held claim back untouched (the broker, not the event,
-- failed), due at once (see dueAgainRules in queries.go). Rows found as in
-- held_delivered.sql.
UPDATE {{table}} AS t
SET available_at = {{due_now}}, {{handed_back}}, updated_at = statement_timestamp()
WHERE {% if .ByAddress %}t.tableoid = $2::oid AND t.ctid = ANY($1::tid[]){% else %}$1::tid[] IS NULL AND t.event_id = ANY($2::uuid[]){% end %} AND t.status = 'PENDING'{% if .ByAddress %}
  AND t.created_at BETWEEN $3 AND $4 -- see mark_delivered.sql{% end %}
