-- What `relay-cli migrate` adds to an existing outbox table that lacks it
-- (one created by Open Outbox, or by an older relay): each block after an
-- "object:" line is one statement, run only when information_schema shows
-- the object missing. The definitions are schema.sql's; a test checks that
-- an upgraded table ends up the same as a new one.
--
-- Adding seq rebuilds the table and numbers the existing rows in primary
-- key order (for UUIDv7 ids, the order they were made); MySQL blocks writes
-- to the table meanwhile.

-- object: column seq
ALTER TABLE {{table}} ADD COLUMN seq BIGINT NOT NULL AUTO_INCREMENT,
    ADD UNIQUE KEY `{{name}}_seq_idx` (seq);

-- object: index {{name}}_pending_idx
ALTER TABLE {{table}} ADD KEY `{{name}}_pending_idx` (status, available_at, created_at, seq, attempts);

-- object: index {{name}}_key_order_idx
ALTER TABLE {{table}} ADD KEY `{{name}}_key_order_idx` (status, partition_key, created_at, seq);

-- object: index {{name}}_delivering_idx
ALTER TABLE {{table}} ADD KEY `{{name}}_delivering_idx` (status, locked_at);

-- object: index {{name}}_delivered_idx
ALTER TABLE {{table}} ADD KEY `{{name}}_delivered_idx` (status, delivered_at);

-- object: index {{name}}_dead_idx
ALTER TABLE {{table}} ADD KEY `{{name}}_dead_idx` (status, updated_at);
