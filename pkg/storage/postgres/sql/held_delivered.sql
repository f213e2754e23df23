-- Settle delivered events of a held claim (LEASE_MODE=lock), in the claim's
-- transaction: its row locks kept every other statement away, so the rows
-- are still PENDING, where the claim found them. They are found by
-- their addresses ($1) within their table ($2, the partition on a
-- partitioned table, where another partition's rows have the same
-- addresses): while the locks are held no address can hold another row.
-- (SettleHeld, after the transaction ended without this, finds them by id
-- alone.) No check of each row's id against the batch's: as an array
-- parameter it is a linear search, 2 µs an event at 500 rows.
-- statement_timestamp(), not now(): the transaction began at the claim,
-- before the batch was published.
UPDATE {{table}} AS t
SET status = 'DELIVERED', delivered_at = statement_timestamp(), updated_at = statement_timestamp()
WHERE {% if .ByAddress %}t.tableoid = $2::oid AND t.ctid = ANY($1::tid[]){% else %}$1::tid[] IS NULL AND t.event_id = ANY($2::uuid[]){% end %} AND t.status = 'PENDING'{% if .ByAddress %}
  AND t.created_at BETWEEN $3 AND $4 -- see mark_delivered.sql{% end %}
