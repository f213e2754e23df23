-- Extend the lease of events still being published, so that a slow broker
-- does not let the reaper hand them to another relay. The new locked_at is
-- the new lease.
UPDATE {{table}}
SET locked_at = now()
WHERE event_id = ANY($3::uuid[])
  AND status = 'DELIVERING' AND locked_by = $1 AND locked_at = $2
RETURNING locked_at
