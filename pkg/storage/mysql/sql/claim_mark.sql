-- Claim, second statement: move the rows the claim read to DELIVERING under
-- one lease. ? are the relay id, the stamp (twice) and the ids ({{ids}}).
-- The status check keeps an ordered claim, which reads without locking,
-- from leasing a row that changed meanwhile.
UPDATE {{table}} FORCE INDEX (PRIMARY)
SET status = 'DELIVERING', locked_by = ?, locked_at = ?, updated_at = ?
WHERE event_id IN ({{ids}}) AND status = 'PENDING'
