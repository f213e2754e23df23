-- The lease stamp of the claim that follows in the same pipeline (one
-- implicit transaction, so the same now()): known before the claimed rows
-- are read, so that rows leased by a claim whose answer is lost halfway can
-- be handed back at once.
SELECT now()
