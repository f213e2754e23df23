-- InnoDB's estimate of the table's rows, for an estimate of the DELIVERED
-- ones. The arguments are the database (NULL: the connection's) and the
-- table's name; no row or NULL when the server has no estimate.
SELECT TABLE_ROWS
FROM information_schema.TABLES
WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?
