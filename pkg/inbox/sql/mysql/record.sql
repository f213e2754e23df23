-- Records that a consumer applies an event. InnoDB makes a concurrent
-- transaction that recorded the same pair first hold this one until it
-- ends: a commit makes this a duplicate (0 rows), a rollback lets it
-- insert. IGNORE would also turn bad values into warnings; the inbox checks
-- consumer and event id before they get here, so only the duplicate is
-- ever ignored.
INSERT IGNORE INTO {{table}} (consumer, event_id, processed_at) VALUES (?, ?, UTC_TIMESTAMP(6))
