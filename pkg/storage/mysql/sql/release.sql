-- Hand events of one lease back untouched: the broker, not the event,
-- failed. updated_at = now puts the row (state_at is the later of it and
-- available_at) in front of the claims, which go forward from where they
-- ended. available_at stays when the row is due again already; a fresh
-- one (available_at not after created_at) becomes due again, now or just
-- after its created_at, so that claims beside a log reader
-- (FreshEvents.ToLog), which leave fresh rows to the log, take it. ? the
-- ids ({{ids}}), the relay id, the stamps ({{stamps}}).
UPDATE {{table}} FORCE INDEX (PRIMARY)
SET status = 'PENDING', locked_by = NULL, locked_at = NULL, updated_at = UTC_TIMESTAMP(6),
    available_at = IF(available_at > created_at, available_at, GREATEST(UTC_TIMESTAMP(6), created_at + INTERVAL 1 MICROSECOND))
WHERE event_id IN ({{ids}})
  AND status = 'DELIVERING' AND locked_by = ? AND locked_at IN ({{stamps}})
