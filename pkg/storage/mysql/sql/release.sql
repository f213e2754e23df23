-- Hand events of one lease back untouched: the broker, not the event,
-- failed. ? the ids ({{ids}}), the relay id, the stamps ({{stamps}}).
UPDATE {{table}} FORCE INDEX (PRIMARY)
SET status = 'PENDING', locked_by = NULL, locked_at = NULL, updated_at = UTC_TIMESTAMP(6)
WHERE event_id IN ({{ids}})
  AND status = 'DELIVERING' AND locked_by = ? AND locked_at IN ({{stamps}})
