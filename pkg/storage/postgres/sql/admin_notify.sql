-- Wake the relays listening on the table's channel, as the insert trigger
-- does, after rows became PENDING without an insert. $1 is the table.
SELECT pg_notify(left(n.nspname || '.' || c.relname, 63), '')
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = to_regclass($1)
