-- Delete one batch of records older than ? microseconds, of one consumer
-- only when the consumer filter is filled in, at most ? rows, oldest first
-- along the processed_at index.
DELETE FROM {{table}}
WHERE processed_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND {{consumer_filter}}
ORDER BY processed_at
LIMIT ?
