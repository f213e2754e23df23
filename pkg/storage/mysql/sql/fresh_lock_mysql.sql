-- fresh_lock.sql in MySQL 8's syntax, which takes SKIP LOCKED after FOR
-- SHARE and not after LOCK IN SHARE MODE (MariaDB knows no FOR SHARE).
SELECT id FROM {{log_lock}} WHERE id = 1 FOR SHARE SKIP LOCKED
