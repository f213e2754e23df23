-- Turn a held claim into a lease (LEASE_MODE=lock), in its transaction,
-- which then commits: its batch has stayed at the broker longer than a
-- held claim may keep its transaction open (the transaction holds vacuum's
-- horizon back). The rows move to DELIVERING under one stamp, $1's lease,
-- as claim.sql's would; rows found as in held_delivered.sql.
UPDATE {{table}} AS t
SET status = 'DELIVERING', locked_by = $1, locked_at = statement_timestamp(), updated_at = statement_timestamp()
FROM unnest($2::tid[], $3::uuid[]) AS f(row_id, event_id)
WHERE t.ctid = f.row_id AND t.event_id = f.event_id AND t.status = 'PENDING'
  AND t.created_at BETWEEN $4 AND $5 -- see mark_delivered.sql
RETURNING t.locked_at
