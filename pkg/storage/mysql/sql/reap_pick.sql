-- Reap, first statement: lock at most ? leases older than ? microseconds by
-- the database's clock, oldest first. SKIP LOCKED lets any number of
-- reapers run at once; the index is named for the reason claim.sql names
-- its own (a DELIVERING row's state_at is its locked_at). attempts lets
-- the caller count how many will go DEAD.
SELECT event_id, attempts
FROM {{table}} FORCE INDEX (`{{name}}_state_seq_idx`)
WHERE status = 'DELIVERING' AND state_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
ORDER BY state_at
LIMIT ?
FOR UPDATE SKIP LOCKED
