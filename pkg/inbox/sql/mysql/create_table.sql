-- The inbox: one row per event a consumer has applied. The primary key is
-- what makes a second delivery of an event a no-op for that consumer.
-- VARBINARY compares bytes exactly: a VARCHAR's default collation would
-- take "ABC" and "abc", or "a" and "a ", for the same id. processed_at is
-- UTC, which the inbox writes from the server's clock (UTC_TIMESTAMP) with
-- every record, so retention does not depend on session time zones.
CREATE TABLE IF NOT EXISTS {{table}} (
    consumer     VARBINARY(255) NOT NULL,
    event_id     VARBINARY(255) NOT NULL,
    processed_at DATETIME(6) NOT NULL,
    PRIMARY KEY (consumer, event_id),
    KEY {{index}} (processed_at)
) ENGINE = InnoDB
