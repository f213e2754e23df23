-- The table's AUTO_INCREMENT counter, the next seq InnoDB hands out (NULL
-- or 1 when none was): every seq handed out so far, committed or not, is
-- below it. The arguments are the database and the table. MySQL 8 answers
-- from a cache unless the session's information_schema_stats_expiry is 0
-- (last_seq_fresh.sql); MariaDB asks the engine each time.
SELECT COALESCE(AUTO_INCREMENT, 1) FROM information_schema.TABLES
WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?
