-- Records that a consumer applies an event. A concurrent transaction that
-- recorded the same pair first makes this wait for it: if it commits, this
-- inserts nothing (a duplicate); if it rolls back, this inserts. So a
-- duplicate is only ever reported for an event whose effect committed.
INSERT INTO {{table}} (consumer, event_id) VALUES ($1, $2)
ON CONFLICT (consumer, event_id) DO NOTHING
