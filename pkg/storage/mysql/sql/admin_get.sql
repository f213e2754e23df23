-- One row, every column, for `relay-cli show`.
SELECT event_id, event_type, partition_key, status, attempts, last_error,
       available_at, locked_by, locked_at, delivered_at, created_at, updated_at, seq,
       TIMESTAMPDIFF(MICROSECOND, created_at, UTC_TIMESTAMP(6)),
       payload, headers
FROM {{table}}
WHERE event_id = ?
