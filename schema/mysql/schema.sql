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
--   seq            insertion order: the rows of one statement share
--                  created_at, so created_at alone cannot order them.
--
-- MySQL has no partial indexes. Each index below leads with status, so the
-- rows of one status form one contiguous range of it, which serves the
-- purpose a PostgreSQL partial index serves:
--   pending_idx     the claim walks the due PENDING rows oldest first; the
--                   backlog counts them (attempts makes it covering);
--   key_order_idx   ORDERING=partition walks the keys with PENDING events,
--                   reads each key's events in order, and checks for
--                   DELIVERING and DEAD events of a key;
--   delivering_idx  the reaper finds expired leases;
--   delivered_idx,
--   dead_idx        pruning, recent deliveries, retry-dead.
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
    PRIMARY KEY (event_id),
    UNIQUE KEY `{{name}}_seq_idx` (seq),
    KEY `{{name}}_pending_idx` (status, available_at, created_at, seq, attempts),
    KEY `{{name}}_key_order_idx` (status, partition_key, created_at, seq),
    KEY `{{name}}_delivering_idx` (status, locked_at),
    KEY `{{name}}_delivered_idx` (status, delivered_at),
    KEY `{{name}}_dead_idx` (status, updated_at),
    CONSTRAINT `{{name}}_valid_status` CHECK (status IN ('PENDING', 'DELIVERING', 'DELIVERED', 'DEAD'))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
