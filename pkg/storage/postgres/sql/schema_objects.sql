-- Everything migrate may create, to report what it created and what existed.
SELECT 'table ' || c.relname FROM pg_class c
WHERE c.oid = to_regclass($1)
UNION ALL
SELECT 'column ' || a.attname FROM pg_attribute a
WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped AND a.attname = 'seq'
UNION ALL
SELECT CASE c.relkind WHEN 'i' THEN 'index ' ELSE 'sequence ' END || c.relname
FROM pg_class c
WHERE c.relnamespace = coalesce((SELECT relnamespace FROM pg_class WHERE oid = to_regclass($1)),
                                current_schema()::regnamespace)
  AND c.relkind IN ('i', 'S') AND c.relname = ANY($2::text[])
UNION ALL
SELECT 'trigger ' || t.tgname FROM pg_trigger t
WHERE t.tgrelid = to_regclass($1) AND NOT t.tgisinternal
UNION ALL
SELECT 'function ' || p.proname || '()' FROM pg_proc p
WHERE p.oid = to_regprocedure($3)
