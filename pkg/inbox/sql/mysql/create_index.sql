-- The processed_at index, for a table that exists without it (made by
-- hand); create_table.sql makes it with the table otherwise.
CREATE INDEX {{index}} ON {{table}} (processed_at)
