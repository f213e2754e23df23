-- claim_fresh.sql for a candidate r of claim_ordered_run.sql: a fresh
-- event past ? (the claims' highest seq) counts as not due, so a key whose
-- first event is the log's is skipped and a run stops before one.
AND (r.available_at > r.created_at OR r.seq <= ?)
