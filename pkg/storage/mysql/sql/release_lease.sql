-- Hand back every row of one lease, attempts unchanged: the claim that took
-- them failed before the relay could read them all. updated_at = now puts
-- them in front of the claims, as release.sql does. ? the relay id and the
-- stamp.
UPDATE {{table}}
SET status = 'PENDING', locked_by = NULL, locked_at = NULL, updated_at = UTC_TIMESTAMP(6)
WHERE status = 'DELIVERING' AND locked_by = ? AND locked_at = ?
