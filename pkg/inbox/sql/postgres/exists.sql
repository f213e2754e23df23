-- Whether the relation named $1 (quoted, optionally schema-qualified)
-- exists, resolved through the search_path as the statements will be.
SELECT to_regclass($1) IS NOT NULL
