-- What admin_prune_delivered would delete, for `relay-cli prune --dry-run`.
SELECT COUNT(*)
FROM {{table}}
WHERE status = 'DELIVERED' AND state_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
