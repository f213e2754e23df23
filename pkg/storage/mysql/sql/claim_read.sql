-- Read the rows a claim leased: ? the ids ({{ids}}), the relay id and the
-- stamp.
SELECT event_id, event_type, partition_key, payload, headers, attempts, created_at, seq
FROM {{table}}
WHERE event_id IN ({{ids}}) AND status = 'DELIVERING' AND locked_by = ? AND locked_at = ?
