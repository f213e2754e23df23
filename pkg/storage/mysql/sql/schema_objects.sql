-- The table and what hangs off it, to report what migrate created and what
-- existed: the table, the columns the relay adds (seq, state_at), and its
-- indexes. The arguments are the database and the table, three times.
SELECT CONCAT('table ', table_name) FROM information_schema.tables
WHERE table_schema = ? AND table_name = ?
UNION ALL
SELECT CONCAT('column ', column_name) FROM information_schema.columns
WHERE table_schema = ? AND table_name = ? AND column_name IN ('seq', 'state_at')
UNION ALL
SELECT DISTINCT CONCAT('index ', index_name) FROM information_schema.statistics
WHERE table_schema = ? AND table_name = ?
