-- The inbox: one row per event a consumer has applied. The primary key is
-- what makes a second delivery of an event a no-op for that consumer; the
-- event id is text because not every producer's ids are UUIDs (CloudEvents
-- ids are any string).
CREATE TABLE IF NOT EXISTS {{table}} (
    consumer     TEXT NOT NULL,
    event_id     TEXT NOT NULL,
    processed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
)
