-- Partitioned by {{partition_by}} on created_at (relay-cli migrate
-- --partition-by {{partition_by}}). The primary key must include the partition
-- column, so it is (event_id, created_at): PostgreSQL checks event_id's
-- uniqueness within a partition only, and a unique event_id across
-- partitions is the producer's promise (UUIDv7 keeps it). An existing table
-- that is not partitioned is never converted: see "Partitioned tables" in
-- docs/operations.md to move one over.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_class WHERE oid = to_regclass('{{table}}') AND relkind <> 'p') THEN
        RAISE EXCEPTION 'table {{table}} exists and is not partitioned'
            USING HINT = 'migrate --partition-by creates a new table only; see "Partitioned tables" in docs/operations.md to move an existing one over';
    END IF;
END
$$;

