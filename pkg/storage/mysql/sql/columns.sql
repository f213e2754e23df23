-- The columns of the outbox table, to check it before relaying. ? are the
-- database and the table.
SELECT column_name
FROM information_schema.columns
WHERE table_schema = ? AND table_name = ?
