-- What admin_prune_dead would delete, for `relay-cli prune --dry-run`.
SELECT count(*)
FROM {{table}}
WHERE status = 'DEAD' AND updated_at < now() - $1::bigint * interval '1 microsecond'
