-- Delete one batch of DELIVERED rows delivered more than the first argument
-- (microseconds) ago, at most the second, oldest first, so that each batch
-- is a short transaction holding few locks. It reads the DELIVERED range of
-- state_seq_idx (a DELIVERED row's state_at is its delivered_at); the status
-- condition means a row that changed meanwhile is never deleted.
DELETE FROM {{table}}
WHERE status = 'DELIVERED' AND state_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
ORDER BY state_at
LIMIT ?
