-- Delete one batch of DELIVERED rows delivered more than the first argument
-- (microseconds) ago, at most the second, oldest first, so that each batch
-- is a short transaction holding few locks. It reads the DELIVERED range of
-- delivered_idx; the status condition means a row that changed meanwhile is
-- never deleted.
DELETE FROM {{table}}
WHERE status = 'DELIVERED' AND delivered_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
ORDER BY delivered_at
LIMIT ?
