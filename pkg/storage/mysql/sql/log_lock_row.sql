-- Whether the log lock's table holds its row (schema.sql inserts it), for
-- the schema objects migrate reports (schema_objects.sql).
SELECT 1 FROM {{log_lock}} WHERE id = 1
