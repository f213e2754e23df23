-- Give up rather than queue for a table's metadata lock behind a long
-- transaction, where the waiting ALTER would block every producer's
-- insert: $1 seconds (migrate tries again later).
SET SESSION lock_wait_timeout = ?
