-- Whether table $2 in database $1 has index $3.
SELECT count(*) FROM information_schema.statistics
WHERE table_schema = coalesce(nullif(?, ''), database()) AND table_name = ? AND index_name = ?
