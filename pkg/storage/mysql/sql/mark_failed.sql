-- Settle failed events of one lease: count the attempt, keep the error, and
-- either schedule the retry or bury the event. The failures are a derived
-- table of rows (id, error, dead, delay in microseconds), {{failures}}: one
-- "SELECT ?, ?, ?, ?" per failure joined by UNION ALL. The id list repeats
-- them ({{ids}}) so the rows are found through the primary key whatever
-- the optimizer makes of the derived table. Then the relay id and the
-- stamps ({{stamps}}). A retry is due again (available_at after
-- created_at, also for a created_at ahead of the clock), which claims
-- beside a log reader take (FreshEvents).
UPDATE {{table}} AS t FORCE INDEX (PRIMARY)
JOIN ({{failures}}) AS f ON t.event_id = f.id
SET t.status = IF(f.dead, 'DEAD', 'PENDING'),
    t.attempts = t.attempts + 1,
    t.last_error = f.error,
    t.available_at = IF(f.dead, t.available_at,
        GREATEST(UTC_TIMESTAMP(6) + INTERVAL f.delay_us MICROSECOND, t.created_at + INTERVAL 1 MICROSECOND)),
    t.locked_by = NULL, t.locked_at = NULL, t.updated_at = UTC_TIMESTAMP(6)
WHERE t.event_id IN ({{ids}})
  AND t.status = 'DELIVERING' AND t.locked_by = ? AND t.locked_at IN ({{stamps}})
