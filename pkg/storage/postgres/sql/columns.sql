-- The columns of the outbox table, to check it before relaying.
SELECT a.attname
FROM pg_attribute a
WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
