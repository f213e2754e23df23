-- Whether the current user may create and drop the table's partitions:
-- DDL on a table is its owner's, and the owner role's members'. And the
-- owner, quoted, who is to own new partitions too. $1 is the table.
SELECT current_user, pg_has_role(c.relowner, 'USAGE'), c.relowner::regrole::text
FROM pg_class c
WHERE c.oid = to_regclass($1)
