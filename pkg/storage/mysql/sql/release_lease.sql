-- Hand back every row of one lease, attempts unchanged: the claim that took
-- them failed before the relay could read them all. updated_at = now puts
-- them in front of the claims, and a fresh row becomes due again, as
-- release.sql does. ? the relay id and the stamp.
UPDATE {{table}}
SET status = 'PENDING', locked_by = NULL, locked_at = NULL, updated_at = UTC_TIMESTAMP(6),
    available_at = IF(available_at > created_at, available_at, GREATEST(UTC_TIMESTAMP(6), created_at + INTERVAL 1 MICROSECOND))
WHERE status = 'DELIVERING' AND locked_by = ? AND locked_at = ?
