-- Settle delivered events that the relay read from the binlog
-- (CAPTURE=binlog). No lease guards them: a row is the log reader's while
-- it is PENDING and fresh (available_at not after created_at); a row a
-- claim took meanwhile, or one handed to the claims, is left alone. ? are
-- the ids ({{ids}}), found by the primary key.
UPDATE {{table}} FORCE INDEX (PRIMARY)
SET status = 'DELIVERED', delivered_at = UTC_TIMESTAMP(6), updated_at = UTC_TIMESTAMP(6)
WHERE event_id IN ({{ids}})
  AND status = 'PENDING' AND available_at <= created_at
