-- Settle delivered events of one lease by deleting them
-- (DELIVERED_RETENTION=0): ? the ids ({{ids}}), the relay id, the stamps
-- the rows may hold ({{stamps}}) — the same lease guard as mark_delivered.
-- A single-table DELETE takes no index hint; the primary key is the way
-- in it finds for an IN list of ids.
DELETE FROM {{table}}
WHERE event_id IN ({{ids}})
  AND status = 'DELIVERING' AND locked_by = ? AND locked_at IN ({{stamps}})
