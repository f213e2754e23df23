-- Delete one batch of DEAD rows that died (updated_at) more than the first
-- argument (microseconds) ago, at most the second; see
-- admin_prune_delivered.sql. The status condition matters here: a row that
-- retry-dead sends back to PENDING meanwhile must stay. A DEAD row's
-- state_at is its updated_at.
DELETE FROM {{table}}
WHERE status = 'DEAD' AND state_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
ORDER BY state_at
LIMIT ?
