-- The newest rows, optionally of one status and event type (NULL: any),
-- at most the last argument. Payload and headers are left out: listing is
-- for finding rows, and payloads can be large. The driver fills in the
-- arguments itself, so a NULL filter is a constant the server folds away.
SELECT event_id, event_type, partition_key, status, attempts, last_error,
       available_at, locked_by, locked_at, delivered_at, created_at, updated_at, seq,
       TIMESTAMPDIFF(MICROSECOND, created_at, UTC_TIMESTAMP(6))
FROM {{table}}
WHERE (? IS NULL OR status = ?)
  AND (? IS NULL OR event_type = ?)
ORDER BY created_at DESC, seq DESC
LIMIT ?
