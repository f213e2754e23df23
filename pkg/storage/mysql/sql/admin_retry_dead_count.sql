-- What admin_retry_dead would move, for `relay-cli retry-dead --dry-run`
-- and its confirmation prompt: the same filter and limit.
SELECT COUNT(*)
FROM (
    SELECT 1
    FROM {{table}}
    WHERE status = 'DEAD' {{filter}}
    LIMIT ?
) AS matching
