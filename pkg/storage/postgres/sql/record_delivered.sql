-- Settle delivered events that the relay read from the write-ahead log
-- (CAPTURE=wal). No lease guards them: a row is the log reader's while it
-- is PENDING and fresh (available_at not after created_at); a row a claim
-- took meanwhile, or one handed to the claims, is left alone.
UPDATE {{table}}
SET status = 'DELIVERED', delivered_at = now(), updated_at = now()
WHERE event_id = ANY($1::uuid[])
  AND status = 'PENDING' AND available_at <= created_at
  AND created_at BETWEEN $2 AND $3 -- see mark_delivered.sql
