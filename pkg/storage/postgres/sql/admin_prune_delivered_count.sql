-- What admin_prune_delivered would delete, for `relay-cli prune --dry-run`:
-- the same two ranges.
SELECT (SELECT count(*) FROM {{table}}
        WHERE status = 'DELIVERED' AND {{delivered_late}}
          AND delivered_at < now() - $1::bigint * interval '1 microsecond')
     + (SELECT count(*) FROM {{table}}
        WHERE created_at < now() - $1::bigint * interval '1 microsecond'
          AND status = 'DELIVERED' AND NOT {{delivered_late}}
          AND delivered_at < now() - $1::bigint * interval '1 microsecond')
