-- Whether the table exists, and its partition key ('' when it is not
-- partitioned), e.g. RANGE (created_at). $1 is the table.
SELECT to_regclass($1) IS NOT NULL, coalesce(pg_get_partkeydef(to_regclass($1)), '')
