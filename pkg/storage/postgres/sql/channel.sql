-- The table's NOTIFY channel, spelt as its insert trigger spells it: the
-- schema-qualified name, cut to PostgreSQL's 63-byte limit on channel
-- names. $1 is the table's name as configured, resolved like any other.
SELECT left(n.nspname || '.' || c.relname, 63)
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = to_regclass($1)
