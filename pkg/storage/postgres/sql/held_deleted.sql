-- Settle delivered events of a held claim by deleting them
-- (DELIVERED_RETENTION=0); see held_delivered.sql.
DELETE FROM {{table}} AS t
USING unnest($1::tid[], $2::uuid[]) AS f(row_id, event_id)
WHERE {{row_match}} AND t.status = 'PENDING'
  AND t.created_at BETWEEN $3 AND $4 -- see mark_delivered.sql
