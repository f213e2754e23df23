-- Whether table $2 exists in database $1 (the connection's when empty).
SELECT count(*) FROM information_schema.tables
WHERE table_schema = coalesce(nullif(?, ''), database()) AND table_name = ?
