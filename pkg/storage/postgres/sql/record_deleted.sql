-- Settle delivered events read from the write-ahead log by deleting them
-- (DELIVERED_RETENTION=0), found and guarded as in record_delivered.sql.
DELETE FROM {{table}} AS t
USING unnest($1::uuid[], $2::timestamptz[]) AS f(event_id, created_at)
WHERE t.event_id = f.event_id AND {% if .ExactCreated %}t.created_at = f.created_at{% else %}true{% end %}
  AND t.status = 'PENDING' AND t.available_at <= t.created_at
