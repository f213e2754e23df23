-- Settle delivered events of a held claim (LEASE_MODE=lock), in the claim's
-- transaction: its row locks kept every other statement away, so the rows
-- are still PENDING, where the claim found them: {{row_match}} finds each
-- by its address and checks its id. (RecordHeld, after the transaction
-- ended without this, finds them by id alone.) statement_timestamp(), not
-- now(): the transaction began at the claim, before the batch was
-- published.
UPDATE {{table}} AS t
SET status = 'DELIVERED', delivered_at = statement_timestamp(), updated_at = statement_timestamp()
FROM unnest($1::tid[], $2::uuid[]) AS f(row_id, event_id)
WHERE {{row_match}} AND t.status = 'PENDING'
  AND t.created_at BETWEEN $3 AND $4 -- see mark_delivered.sql
