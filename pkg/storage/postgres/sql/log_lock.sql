-- The table's log lock, exclusively, for as long as the session holds it
-- (LogRecorder.LockLog): it waits for the claims that hold it shared
-- (fresh_lock.sql), and a claim that tries it meanwhile takes no fresh
-- row past its relay's backfill.
SELECT pg_advisory_lock({{log_lock}})
