-- Hand events read from the binlog to the claims, attempts unchanged: an
-- earlier event holds their key, and the ordered claims deliver a key's
-- events in order. Due again at once (or just after a created_at ahead of
-- the clock), and updated_at = now puts the row (state_at) in front of the
-- claims, which go forward from where they ended. ? are the ids
-- ({{ids}}); rows guarded as in record_delivered.sql.
UPDATE {{table}} FORCE INDEX (PRIMARY)
SET available_at = GREATEST(UTC_TIMESTAMP(6), created_at + INTERVAL 1 MICROSECOND), updated_at = UTC_TIMESTAMP(6)
WHERE event_id IN ({{ids}})
  AND status = 'PENDING' AND available_at <= created_at
