-- Serialise inbox creation with other migrations: two CREATE TABLE IF NOT
-- EXISTS racing in PostgreSQL can both miss the table and one then fails
-- on the catalog's unique index. $1 is the migration lock's key.
SELECT pg_advisory_xact_lock($1), set_config('lock_timeout', '10s', true)
