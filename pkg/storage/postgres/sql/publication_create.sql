-- The publication CAPTURE=wal reads the outbox through: inserts only (the
-- relay's own updates and deletes are not events), and for a partitioned
-- table as inserts into the table itself, whichever partition holds them.
-- Running it again changes nothing. {{publication}} is a checked
-- identifier.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = '{{publication}}') THEN
        CREATE PUBLICATION {{publication}} FOR TABLE {{table}}
            WITH (publish = 'insert', publish_via_partition_root = true);
    END IF;
END
$$
