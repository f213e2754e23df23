-- Hand back every row of one lease, attempts unchanged: the claim that took
-- them failed before the relay could read them all.
-- available_at = now(): see release.sql.
UPDATE {{table}}
SET status = 'PENDING', available_at = now(), locked_by = NULL, locked_at = NULL, updated_at = now()
WHERE status = 'DELIVERING' AND locked_by = $1 AND locked_at = $2
