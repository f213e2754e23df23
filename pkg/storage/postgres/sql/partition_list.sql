-- The table's partitions, oldest first and the default partition last: name,
-- schema-qualified quoted name, OID, whether it is the default, the
-- created_at range [from, to) read from its bound (NULL when the bound is
-- not a plain finite range), and its size with indexes. $1 is the table.
SELECT relname, qualified, oid, is_default,
       CASE WHEN isfinite(lo) THEN lo END, CASE WHEN isfinite(hi) THEN hi END, bytes
FROM (
    SELECT c.relname, format('%I.%I', n.nspname, c.relname) AS qualified, c.oid,
           b.bound = 'DEFAULT' AS is_default,
           (regexp_match(b.bound, '^FOR VALUES FROM \(''([^'']*)''\) TO \(''([^'']*)''\)$'))[1]::timestamptz AS lo,
           (regexp_match(b.bound, '^FOR VALUES FROM \(''([^'']*)''\) TO \(''([^'']*)''\)$'))[2]::timestamptz AS hi,
           pg_total_relation_size(c.oid) AS bytes
    FROM pg_inherits i
    JOIN pg_class c ON c.oid = i.inhrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace
    CROSS JOIN LATERAL (SELECT pg_get_expr(c.relpartbound, c.oid) AS bound) b
    WHERE i.inhparent = to_regclass($1)
) p
ORDER BY is_default, lo NULLS LAST, relname
