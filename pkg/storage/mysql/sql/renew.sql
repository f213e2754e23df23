-- Move the rows of a lease still being published to a new stamp, so that a
-- slow broker does not let the reaper hand them to another relay. The relay
-- picks the stamp: if the answer is lost it still knows what the rows may
-- hold, and repeating the statement is harmless (the connection counts
-- matched rows, so a repeat still reports them). ? the new stamp, the ids
-- ({{ids}}), the relay id, the stamps the rows may hold now ({{stamps}}).
UPDATE {{table}} FORCE INDEX (PRIMARY)
SET locked_at = ?
WHERE event_id IN ({{ids}})
  AND status = 'DELIVERING' AND locked_by = ? AND locked_at IN ({{stamps}})
