-- MySQL 8: make information_schema.TABLES ask the engine for the
-- AUTO_INCREMENT counter instead of its cache, on the connection that runs
-- last_seq.sql next (the setting only decides how fresh that session's
-- information_schema statistics are).
SET SESSION information_schema_stats_expiry = 0
