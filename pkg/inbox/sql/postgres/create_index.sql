-- Retention deletes by age; without this index every prune batch would
-- scan the whole table.
CREATE INDEX IF NOT EXISTS {{index}} ON {{table}} (processed_at)
