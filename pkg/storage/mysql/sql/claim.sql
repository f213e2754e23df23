-- Claim, first statement: lock up to the argument's number of due PENDING
-- rows that no other claim holds, in (state_at, seq) order, and read their
-- ids, sizes (payload and headers: the claim keeps as many as fit
-- MaxBytes, and only their contents cross the network) and positions; a
-- PENDING row's state_at is the moment it could first be claimed.
-- {{floor}} is empty for a claim that looks at every PENDING row (a
-- sweep), or claim_floor.sql, which starts the range at the relay's claim
-- position so that the scan does not step over the entries that earlier
-- claims left behind (InnoDB keeps them while any snapshot may need them).
-- {{fresh}} is empty, or beside a log reader claim_fresh.sql, which
-- leaves the log its fresh rows (FreshEvents).
-- The index is named so that the rows are read in its order and the LIMIT
-- stops the scan: a plan that sorted would lock every due row before the
-- LIMIT, and every other claimer would skip them all. UTC_TIMESTAMP(6) is
-- the same for the whole statement: it is the lease stamp, read back
-- exactly as stored.
SELECT event_id, LENGTH(payload) + LENGTH(headers), state_at, seq, UTC_TIMESTAMP(6)
FROM {{table}} FORCE INDEX (`{{name}}_state_seq_idx`)
WHERE status = 'PENDING' AND state_at <= UTC_TIMESTAMP(6) {{floor}} {{fresh}}
ORDER BY state_at, seq
LIMIT ?
FOR UPDATE SKIP LOCKED
