-- Reap, second statement: take back the expired leases the first one
-- locked ({{ids}}). The expired lease counts as an attempt; rows that
-- already have ? attempts (storage.ReapParams.DeadFrom, where the limit is
-- worked out) go DEAD, the others PENDING. MySQL assigns left to right,
-- each expression seeing the columns already assigned: status and
-- last_error come before the columns they read change. A reaped row is due
-- again (available_at after created_at), as mark_failed.sql's retries.
UPDATE {{table}} FORCE INDEX (PRIMARY)
SET status = IF(attempts >= ?, 'DEAD', 'PENDING'),
    last_error = CONCAT('lease expired (relay ', COALESCE(locked_by, 'unknown'), ')'),
    attempts = attempts + 1,
    available_at = GREATEST(UTC_TIMESTAMP(6), created_at + INTERVAL 1 MICROSECOND), locked_by = NULL, locked_at = NULL, updated_at = UTC_TIMESTAMP(6)
WHERE event_id IN ({{ids}}) AND status = 'DELIVERING'
