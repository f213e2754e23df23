-- The table and what hangs off it, to report what migrate created and what
-- existed: its columns that migrate adds, its indexes, its sequence, its
-- triggers, the notify, event id and writer functions, event_id's default when it
-- is that function (migrate gives it to a table whose ids were
-- gen_random_uuid()'s) and, on a partitioned table, its default partition
-- (time partitions come and go; `relay-cli partitions` lists them). $1 is
-- the table, $2 its sequence, $3 the notify function's signature, $4 the
-- default partition, $5 the event id function's signature, $6 the writer
-- function's.
SELECT 'table ' || c.relname FROM pg_class c
WHERE c.oid = to_regclass($1)
UNION ALL
SELECT 'column ' || a.attname FROM pg_attribute a
WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped AND a.attname IN ('seq', 'writer_xid')
UNION ALL
SELECT 'index ' || c.relname FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid
WHERE x.indrelid = to_regclass($1)
UNION ALL
SELECT 'sequence ' || c.relname FROM pg_class c
WHERE c.oid = to_regclass($2)
UNION ALL
-- A writer trigger that is not ALWAYS (an earlier version's) is named as
-- such, so that migrate enables it and says so.
SELECT 'trigger ' || t.tgname
       || CASE WHEN t.tgfoid = to_regprocedure($6) AND t.tgenabled <> 'A' THEN ' (not ALWAYS)' ELSE '' END
FROM pg_trigger t
WHERE t.tgrelid = to_regclass($1) AND NOT t.tgisinternal
UNION ALL
SELECT 'function ' || p.proname || '()' FROM pg_proc p
WHERE p.oid IN (to_regprocedure($3), to_regprocedure($5), to_regprocedure($6))
UNION ALL
SELECT 'default event_id' FROM pg_attrdef d
JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
JOIN pg_depend dep ON dep.classid = 'pg_attrdef'::regclass AND dep.objid = d.oid
WHERE d.adrelid = to_regclass($1) AND a.attname = 'event_id'
  AND dep.refclassid = 'pg_proc'::regclass AND dep.refobjid = to_regprocedure($5)
UNION ALL
SELECT 'partition ' || c.relname FROM pg_class c
WHERE c.oid = to_regclass($4)
