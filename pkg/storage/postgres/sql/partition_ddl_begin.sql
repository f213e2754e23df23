-- Start a transaction that changes partitions: the locks it needs are
-- waited for at most $1 (a text interval), so a claim or insert queued
-- behind the waiting lock is held up no longer than that; the relay tries
-- again at its next cycle.
SELECT set_config('lock_timeout', $1, true)
