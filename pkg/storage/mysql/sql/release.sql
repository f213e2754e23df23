-- Hand events of one lease back untouched: the broker, not the event,
-- failed. available_at stays; updated_at = now puts the row (state_at is
-- the later of the two) in front of the claims, which go forward from
-- where they ended. ? the ids ({{ids}}), the relay id, the stamps
-- ({{stamps}}).
UPDATE {{table}} FORCE INDEX (PRIMARY)
SET status = 'PENDING', locked_by = NULL, locked_at = NULL, updated_at = UTC_TIMESTAMP(6)
WHERE event_id IN ({{ids}})
  AND status = 'DELIVERING' AND locked_by = ? AND locked_at IN ({{stamps}})
