-- Settle delivered events of one lease by deleting them
-- (DELIVERED_RETENTION=0): the same lease guard as mark_delivered.
DELETE FROM {{table}}
WHERE event_id = ANY($3::uuid[])
  AND status = 'DELIVERING' AND locked_by = $1 AND locked_at = ANY($2::timestamptz[])
  AND created_at BETWEEN $4 AND $5 -- see mark_delivered.sql
