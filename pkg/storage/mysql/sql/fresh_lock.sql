-- Beside a log reader (CAPTURE=binlog, FreshEvents.WhenUnlocked), first in
-- the claim's transaction: the log lock's row, shared, unless a stream
-- holds it (log_lock.sql) or waits for it — SKIP LOCKED passes over a row
-- with a conflicting lock granted or waited for. A row back: no stream
-- holds the lock, the claim may take every fresh row, and its transaction
-- holds the row shared until it ends, so that a stream that starts waits
-- for it. No row: only the fresh rows up to the backfill. MariaDB's
-- syntax; MySQL 8 takes SKIP LOCKED only after FOR SHARE
-- (fresh_lock_mysql.sql).
SELECT id FROM {{log_lock}} WHERE id = 1 LOCK IN SHARE MODE SKIP LOCKED
