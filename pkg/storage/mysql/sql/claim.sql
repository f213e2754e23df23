-- Claim, first statement: lock up to the argument's number of due PENDING
-- rows that no other claim holds, oldest due first (ties in insertion
-- order), and read their ids and sizes (payload and headers: the claim
-- keeps as many as fit MaxBytes, and only their contents cross the
-- network); a PENDING row's state_at is its available_at. The
-- index is named so that the rows are read in its order and the LIMIT stops
-- the scan: a plan that sorted would lock every due row before the LIMIT,
-- and every other claimer would skip them all. UTC_TIMESTAMP(6) is the same
-- for the whole statement: it is the lease stamp, read back exactly as
-- stored.
SELECT event_id, LENGTH(payload) + LENGTH(headers), UTC_TIMESTAMP(6)
FROM {{table}} FORCE INDEX (`{{name}}_state_idx`)
WHERE status = 'PENDING' AND state_at <= UTC_TIMESTAMP(6)
ORDER BY state_at, created_at, seq
LIMIT ?
FOR UPDATE SKIP LOCKED
