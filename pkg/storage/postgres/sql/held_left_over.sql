-- Make due again the rows a held claim (LEASE_MODE=lock) locked but did
-- not take, past its byte limit (claim_held.sql), in the claim's
-- transaction, right after it: they are found by address and id, as the
-- settling statements find theirs (held_delivered.sql).
UPDATE {{table}} AS t
SET available_at = {{due_now}}, updated_at = statement_timestamp()
FROM unnest($1::tid[], $2::uuid[]) AS f(row_id, event_id)
WHERE t.ctid = f.row_id AND t.event_id = f.event_id AND t.status = 'PENDING'
