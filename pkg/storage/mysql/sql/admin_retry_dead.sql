-- Send DEAD rows back to PENDING for a fresh start: attempts 0, due now.
-- last_error stays until the next attempt overwrites it, so the reason is
-- not lost if the retry succeeds, marked as from before the retry with the
-- attempts it had: "before retry-dead (attempts: 25): <error>" (set before
-- attempts: MySQL assigns left to right, each seeing the ones before); due
-- again (available_at after created_at), as every hand-back. {{filter}} is admin_dead_filter.sql; the
-- last argument is the limit, oldest deaths first (a DEAD row's state_at
-- is its updated_at, the moment it died). ORDER BY and WHERE see
-- the rows as they were before the update.
UPDATE {{table}}
SET last_error = CASE WHEN last_error IS NULL OR last_error = '' OR last_error LIKE 'before retry-dead (%' THEN last_error
                      ELSE CONCAT('before retry-dead (attempts: ', attempts, '): ', last_error) END,
    status = 'PENDING', attempts = 0, available_at = GREATEST(UTC_TIMESTAMP(6), created_at + INTERVAL 1 MICROSECOND),
    locked_by = NULL, locked_at = NULL, updated_at = UTC_TIMESTAMP(6)
WHERE status = 'DEAD' {{filter}}
ORDER BY state_at
LIMIT ?
