-- The lease stamp of the claims that follow in the same pipeline (one
-- implicit transaction, so the same now()): known before the claimed rows
-- are read, so that rows leased by a claim whose answer is lost halfway can
-- be handed back at once (release_lease.sql).
SELECT now()
