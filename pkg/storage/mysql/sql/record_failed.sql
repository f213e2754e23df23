-- Record failed attempts of events read from the binlog by the failure
-- rule, as mark_failed.sql does for a lease: count the attempt, keep the
-- error, and either bury the event or make it due again (available_at
-- after created_at) after the back-off. The failures are {{failures}},
-- one "SELECT ?, ?, ?, ?" (id, error, dead, delay in microseconds) per
-- failure joined by UNION ALL, and the ids again ({{ids}}) for the
-- primary key. Rows guarded as in record_delivered.sql.
UPDATE {{table}} AS t FORCE INDEX (PRIMARY)
JOIN ({{failures}}) AS f ON t.event_id = f.id
SET t.status = IF(f.dead, 'DEAD', 'PENDING'),
    t.attempts = t.attempts + 1,
    t.last_error = f.error,
    t.available_at = IF(f.dead, t.available_at,
        GREATEST(UTC_TIMESTAMP(6) + INTERVAL f.delay_us MICROSECOND, t.created_at + INTERVAL 1 MICROSECOND)),
    t.updated_at = UTC_TIMESTAMP(6)
WHERE t.event_id IN ({{ids}})
  AND t.status = 'PENDING' AND t.available_at <= t.created_at
