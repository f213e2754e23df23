-- The table's log lock, exclusively (LogRecorder.LockLog): the one row of
-- {{log_lock}}, locked in a transaction that stays open on a connection of
-- its own until unlock or until the connection ends. It waits for the
-- claims that hold the row shared (fresh_lock.sql), and a claim that
-- tries it meanwhile skips the row and takes no fresh row past its
-- relay's backfill. A lock-wait timeout (innodb_lock_wait_timeout) ends
-- the wait with 1205, and LockLog tries again.
SELECT id FROM {{log_lock}} WHERE id = 1 FOR UPDATE
