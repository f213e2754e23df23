-- What admin_prune_delivered would delete, for `relay-cli prune --dry-run`.
SELECT count(*)
FROM {{table}}
WHERE status = 'DELIVERED' AND delivered_at < now() - $1::bigint * interval '1 microsecond'
