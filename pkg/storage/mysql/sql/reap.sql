-- Reap, second statement: take back the expired leases the first one
-- locked ({{ids}}). An expired lease counts as a failed attempt, so an
-- event that crashes every relay that claims it ends DEAD (when attempts
-- reach ?, the limit) instead of looping forever. MySQL assigns left to
-- right, each expression seeing the columns already assigned: status and
-- last_error come before the columns they read change.
UPDATE {{table}} FORCE INDEX (PRIMARY)
SET status = IF(attempts + 1 >= ?, 'DEAD', 'PENDING'),
    last_error = CONCAT('lease expired (relay ', COALESCE(locked_by, 'unknown'), ')'),
    attempts = attempts + 1,
    available_at = UTC_TIMESTAMP(6), locked_by = NULL, locked_at = NULL, updated_at = UTC_TIMESTAMP(6)
WHERE event_id IN ({{ids}}) AND status = 'DELIVERING'
