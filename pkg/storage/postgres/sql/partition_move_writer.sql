-- The rows partition_move.sql just moved into {{partition}} (not yet
-- attached) that claims may take: their writer becomes the moving
-- transaction. Claims that ran while it moved them skipped the locked
-- originals and may have gone past their writers; the new rows become
-- visible when this transaction commits, so they must carry its id to be
-- found at the claim frontier (docs/architecture.md, "The claim frontier").
UPDATE {{partition}} SET writer_xid = pg_catalog.pg_current_xact_id() WHERE status = 'PENDING'
