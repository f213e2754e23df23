-- Hand back every row of one lease, attempts unchanged: the claim that took
-- them failed before the relay could read them all.
UPDATE {{table}}
SET status = 'PENDING', locked_by = NULL, locked_at = NULL, updated_at = now()
WHERE status = 'DELIVERING' AND locked_by = $1 AND locked_at = $2
