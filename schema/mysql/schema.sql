-- Outbox Relay schema for MySQL 8.0.13 or later and MariaDB 10.6 or later.
--
-- The table follows the Open Outbox table contract column for column, in
-- MySQL's types, so the relay can take over an existing openoutbox_events
-- table (`relay-cli migrate` then adds what it lacks: see upgrade.sql).
-- Running this file again changes nothing. {{table}} is the (quoted) table
-- name and {{name}} its bare name.
--
--   event_id       a UUID in 16 bytes; the relay, relay-cli and every broker
--                  message show it as text (BIN_TO_UUID on MySQL 8, or
--                  HEX, shows it in SQL). The producer helper writes
--                  UUIDv7s; an INSERT without one gets the server's UUID().
--   partition_key  bytes compared bytewise, the order in which Go compares
--                  strings: ordered claims walk the keys in the order the
--                  relay's cursor expects. (utf8mb4_bin is not bytewise: it
--                  pads with spaces, so 'a' = 'a ' and 'a\t' < 'a'.)
--   timestamps     DATETIME(6): microseconds, always UTC. The defaults and
--                  the relay use UTC_TIMESTAMP(6), so a session's time_zone
--                  never shifts them.
--   seq            insertion order, the order in which the events were
--                  written: every order the relay keeps (a batch, a key's
--                  run, what holds a key back) is seq's. created_at is the
--                  start of the writer's transaction and orders nothing:
--                  a transaction that began first can write last.
--
--   state_at       the moment that matters in the row's state, kept by the
--                  server: while PENDING, the moment it could be claimed
--                  (the later of available_at, when it is due, and
--                  updated_at, when it was written or last handed back);
--                  locked_at while DELIVERING (the lease), delivered_at once
--                  DELIVERED, updated_at once DEAD (when it died). Taking
--                  updated_at too puts a row that comes back to PENDING
--                  (released, retried, reaped, retried from DEAD) or that
--                  is written already due (available_at in the past) in
--                  front of the claims, which go forward from where they
--                  ended: they find it at once.
--
-- MySQL has no partial indexes. PostgreSQL keeps one per state; here one
-- index, led by status and then state_at, holds every state as a range
-- ordered by its moment, so the claim, the reaper, pruning and retry-dead
-- each read one range of it. Every change of state moves a row's entry in
-- each index that holds status, so fewer such indexes is less work per
-- event: two, instead of one per state.
--   state_seq_idx  the claim walks the due PENDING rows in (state_at, seq)
--                  order, from where the relay's previous claims ended (a
--                  range that starts at a (state_at, seq) position, so
--                  that it does not step over the entries earlier claims
--                  left behind), and the backlog counts them (attempts and
--                  created_at make it covering); the reaper finds expired
--                  leases; prune and retry-dead find old DELIVERED and DEAD
--                  rows;
--   key_order_seq_idx  ORDERING=partition walks the keys with PENDING
--                  events, reads each key's events in write order (seq),
--                  and checks for DELIVERING and DEAD events of a key
--                  before them;
--   created_idx    the console and `relay-cli list`: every status, newest or
--                  oldest first, a page after a cursor one range of it;
--   key_written_idx  the same for the events of one partition key, in
--                  write order (seq), the order the relay delivers them in.
--                  Neither holds status, so a change of state leaves both
--                  alone.
-- {{name}}_log_lock, one row beside the table, is the table's log lock
-- (CAPTURE=binlog): a log reader locks the row FOR UPDATE while it
-- streams, and claims that take every fresh event lock it shared, SKIP
-- LOCKED (docs/architecture.md, "Storage drivers"). It holds nothing else.
-- (Tables made by releases before these two indexes had state_idx and
-- key_order_idx, ordered by created_at first; migrate adds the new ones
-- and leaves the old ones for relays of the old release still running:
-- see docs/operations.md, "MySQL and MariaDB", for dropping them.)
CREATE TABLE IF NOT EXISTS {{table}} (
    event_id      BINARY(16) NOT NULL DEFAULT (UNHEX(REPLACE(UUID(), '-', ''))),
    event_type    VARCHAR(255) NOT NULL,
    partition_key VARBINARY(1024) NULL,
    payload       LONGBLOB NOT NULL,
    headers       JSON NOT NULL DEFAULT ('{}'),
    status        VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'PENDING',
    attempts      INT NOT NULL DEFAULT 0,
    last_error    TEXT NULL,
    available_at  DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    locked_by     VARCHAR(255) NULL,
    locked_at     DATETIME(6) NULL,
    delivered_at  DATETIME(6) NULL,
    created_at    DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    updated_at    DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    seq           BIGINT NOT NULL AUTO_INCREMENT,
    state_at      DATETIME(6) AS (CASE status WHEN 'PENDING' THEN GREATEST(available_at, updated_at) WHEN 'DELIVERING' THEN locked_at
                      WHEN 'DELIVERED' THEN delivered_at ELSE updated_at END) STORED,
    PRIMARY KEY (event_id),
    UNIQUE KEY `{{name}}_seq_idx` (seq),
    KEY `{{name}}_state_seq_idx` (status, state_at, seq, attempts, created_at),
    KEY `{{name}}_key_order_seq_idx` (status, partition_key, seq),
    KEY `{{name}}_created_idx` (created_at, seq),
    KEY `{{name}}_key_written_idx` (partition_key, seq),
    CONSTRAINT `{{name}}_valid_status` CHECK (status IN ('PENDING', 'DELIVERING', 'DELIVERED', 'DEAD'))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
CREATE TABLE IF NOT EXISTS {{log_lock}} (
    id TINYINT NOT NULL PRIMARY KEY,
    CONSTRAINT `{{name}}_log_lock_one_row` CHECK (id = 1)
) ENGINE = InnoDB;
INSERT IGNORE INTO {{log_lock}} (id) VALUES (1);
