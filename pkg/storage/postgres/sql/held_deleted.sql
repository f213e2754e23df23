-- Settle delivered events of a held claim by deleting them
-- (DELIVERED_RETENTION=0); see held_delivered.sql.
DELETE FROM {{table}} AS t
WHERE {{rows}} AND t.status = 'PENDING'
  AND t.created_at BETWEEN $3 AND $4 -- see mark_delivered.sql
