-- Settle delivered events of one lease: ? the ids ({{ids}}), the relay id,
-- the stamps the rows may hold ({{stamps}}). Every settle finds its rows by
-- the primary key: the other way in, the DELIVERING range of state_seq_idx,
-- holds the rows of every batch in flight.
UPDATE {{table}} FORCE INDEX (PRIMARY)
SET status = 'DELIVERED', delivered_at = UTC_TIMESTAMP(6), updated_at = UTC_TIMESTAMP(6),
    locked_by = NULL, locked_at = NULL
WHERE event_id IN ({{ids}})
  AND status = 'DELIVERING' AND locked_by = ? AND locked_at IN ({{stamps}})
