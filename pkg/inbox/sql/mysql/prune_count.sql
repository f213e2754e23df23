-- How many records prune would delete: older than ? microseconds, and of
-- one consumer when the filter is set.
SELECT count(*) FROM {{table}}
WHERE processed_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND {{consumer_filter}}
