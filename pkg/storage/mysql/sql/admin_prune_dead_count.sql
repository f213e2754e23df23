-- What admin_prune_dead would delete, for `relay-cli prune --dry-run`.
SELECT COUNT(*)
FROM {{table}}
WHERE status = 'DEAD' AND state_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
