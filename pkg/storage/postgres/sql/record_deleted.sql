-- Settle delivered events read from the write-ahead log by deleting them
-- (DELIVERED_RETENTION=0), under record_delivered.sql's guard.
DELETE FROM {{table}}
WHERE event_id = ANY($1::uuid[])
  AND status = 'PENDING' AND available_at <= created_at
  AND created_at BETWEEN $2 AND $3 -- see mark_delivered.sql
