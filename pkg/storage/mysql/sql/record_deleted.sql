-- Settle delivered events read from the binlog by deleting them
-- (DELIVERED_RETENTION=0), found and guarded as in record_delivered.sql.
-- ? are the ids ({{ids}}).
DELETE FROM {{table}}
WHERE event_id IN ({{ids}})
  AND status = 'PENDING' AND available_at <= created_at
