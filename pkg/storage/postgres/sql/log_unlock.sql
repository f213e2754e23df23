-- Releases the table's log lock (log_lock.sql) at once; closing the
-- session would too, but only once its server process has gone.
SELECT pg_advisory_unlock({{log_lock}})
