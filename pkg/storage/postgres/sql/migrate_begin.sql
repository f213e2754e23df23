-- Start a migration: wait for any other (several relays may start with
-- STORAGE_AUTO_MIGRATE at once), and give up rather than queue for a table
-- lock behind a long transaction, where the waiting lock would block every
-- producer's insert. $1 is the migration lock's key.
SELECT pg_advisory_xact_lock($1), set_config('lock_timeout', '10s', true)
