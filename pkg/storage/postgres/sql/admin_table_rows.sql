-- The planner's estimate of the table's rows, for an estimate of the
-- DELIVERED ones: the table's reltuples, or its partitions' sum when it is
-- partitioned. NULL when nothing was ever analyzed (reltuples -1).
SELECT sum(c.reltuples) FILTER (WHERE c.reltuples >= 0 AND c.relkind = 'r')::bigint
FROM pg_class c
WHERE c.oid = '{{table}}'::regclass
   OR c.oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = '{{table}}'::regclass)
