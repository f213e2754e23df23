-- Hand back every row of one lease, attempts unchanged: the claim that took
-- them failed before the relay could read them all. Due at once: see
-- release.sql.
UPDATE {{table}} AS t
SET status = 'PENDING', available_at = {{due_now}}, {{handed_back}}, locked_by = NULL, locked_at = NULL,
    updated_at = statement_timestamp()
WHERE t.status = 'DELIVERING' AND t.locked_by = $1 AND t.locked_at = $2
