-- The sizes (payload and headers) of the rows an ordered claim picked, so
-- that it can keep as many as fit MaxBytes: ? are the ids ({{ids}}).
SELECT event_id, LENGTH(payload) + LENGTH(headers)
FROM {{table}}
WHERE event_id IN ({{ids}})
