-- What `relay-cli migrate` adds to an existing outbox table that lacks it
-- (one created by Open Outbox, or by an older relay): each block after an
-- "object:" line is one statement, run only when information_schema shows
-- the object missing. The definitions are schema.sql's; a test checks that
-- an upgraded table ends up the same as a new one.
--
-- Adding seq and state_at, or changing state_at's expression, rebuilds the
-- table (seq numbers the existing rows in primary key order: for UUIDv7
-- ids, the order they were made); MySQL blocks writes to the table
-- meanwhile, so migrate refuses them unless told --allow-blocking (a
-- maintenance window). Adding an index does not block writes: each says
-- ALGORITHM=INPLACE, LOCK=NONE, so that a server that could not build it
-- so refuses instead of locking the table.
--
-- Nothing here drops what an older relay uses: its state_idx and
-- key_order_idx stay until `relay-cli migrate --cleanup` drops them once no
-- relay of that release runs (docs/operations.md, "Upgrades"), and so does
-- its key_idx, which listed a key's events by created_at.

-- object: column seq
ALTER TABLE {{table}} ADD COLUMN seq BIGINT NOT NULL AUTO_INCREMENT,
    ADD UNIQUE KEY `{{name}}_seq_idx` (seq);

-- object: column state_at
ALTER TABLE {{table}} ADD COLUMN state_at DATETIME(6) AS (CASE status WHEN 'PENDING' THEN GREATEST(available_at, updated_at) WHEN 'DELIVERING' THEN locked_at
                      WHEN 'DELIVERED' THEN delivered_at ELSE updated_at END) STORED;

-- A state_at made by an older relay: a PENDING row's moment was its
-- available_at alone, so a row handed back with an old available_at sat
-- behind the claims' position until a sweep.
-- object: expression state_at
ALTER TABLE {{table}} MODIFY COLUMN state_at DATETIME(6) AS (CASE status WHEN 'PENDING' THEN GREATEST(available_at, updated_at) WHEN 'DELIVERING' THEN locked_at
                      WHEN 'DELIVERED' THEN delivered_at ELSE updated_at END) STORED;

-- object: index {{name}}_state_seq_idx
ALTER TABLE {{table}} ADD KEY `{{name}}_state_seq_idx` (status, state_at, seq, attempts, created_at),
    ALGORITHM=INPLACE, LOCK=NONE;

-- object: index {{name}}_key_order_seq_idx
ALTER TABLE {{table}} ADD KEY `{{name}}_key_order_seq_idx` (status, partition_key, seq),
    ALGORITHM=INPLACE, LOCK=NONE;

-- object: index {{name}}_created_idx
ALTER TABLE {{table}} ADD KEY `{{name}}_created_idx` (created_at, seq),
    ALGORITHM=INPLACE, LOCK=NONE;

-- object: index {{name}}_key_written_idx
ALTER TABLE {{table}} ADD KEY `{{name}}_key_written_idx` (partition_key, seq),
    ALGORITHM=INPLACE, LOCK=NONE;

-- The log lock of CAPTURE=binlog (schema.sql), a table of its own: adding
-- it leaves the outbox table alone.
-- object: table {{name}}_log_lock
CREATE TABLE IF NOT EXISTS {{log_lock}} (
    id TINYINT NOT NULL PRIMARY KEY,
    CONSTRAINT `{{name}}_log_lock_one_row` CHECK (id = 1)
) ENGINE = InnoDB;

-- object: row {{name}}_log_lock
INSERT IGNORE INTO {{log_lock}} (id) VALUES (1);
