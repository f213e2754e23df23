-- Reap, first statement: lock at most ? leases older than ? microseconds by
-- the database's clock, oldest first. SKIP LOCKED lets any number of
-- reapers run at once; the index is named for the reason claim.sql names
-- its own. attempts tells the caller how many will go DEAD.
SELECT event_id, attempts
FROM {{table}} FORCE INDEX (`{{name}}_delivering_idx`)
WHERE status = 'DELIVERING' AND locked_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
ORDER BY locked_at
LIMIT ?
FOR UPDATE SKIP LOCKED
