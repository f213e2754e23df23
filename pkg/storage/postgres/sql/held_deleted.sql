-- Settle delivered events of a held claim by deleting them
-- (DELIVERED_RETENTION=0); see held_delivered.sql.
DELETE FROM {{table}} AS t
WHERE {% if .ByAddress %}t.tableoid = $2::oid AND t.ctid = ANY($1::tid[]){% else %}$1::tid[] IS NULL AND t.event_id = ANY($2::uuid[]){% end %} AND t.status = 'PENDING'{% if .ByAddress %}
  AND t.created_at BETWEEN $3 AND $4 -- see mark_delivered.sql{% end %}
