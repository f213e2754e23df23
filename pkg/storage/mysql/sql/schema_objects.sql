-- The table and what hangs off it, to report what migrate created and what
-- existed: the table, the columns the relay adds (seq, state_at), the
-- expression of state_at when it is this release's (a PENDING row's moment
-- is the later of available_at and updated_at), its indexes, and the log
-- lock's table (its row: log_lock_row.sql). The arguments are the
-- database and the table, four times, then the database and the log
-- lock's table.
SELECT CONCAT('table ', table_name) FROM information_schema.tables
WHERE table_schema = ? AND table_name = ?
UNION ALL
SELECT CONCAT('column ', column_name) FROM information_schema.columns
WHERE table_schema = ? AND table_name = ? AND column_name IN ('seq', 'state_at')
UNION ALL
SELECT 'expression state_at' FROM information_schema.columns
WHERE table_schema = ? AND table_name = ? AND column_name = 'state_at'
  AND LOWER(generation_expression) LIKE '%greatest(%available_at%updated_at%'
UNION ALL
SELECT DISTINCT CONCAT('index ', index_name) FROM information_schema.statistics
WHERE table_schema = ? AND table_name = ?
UNION ALL
SELECT CONCAT('table ', table_name) FROM information_schema.tables
WHERE table_schema = ? AND table_name = ?
