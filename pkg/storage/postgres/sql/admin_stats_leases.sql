-- The relays holding DELIVERING rows now, with their oldest lease: a lease
-- far older than LEASE_TIMEOUT means no reaper is running.
SELECT coalesce(locked_by, ''), count(*), min(locked_at),
       coalesce(extract(epoch FROM now() - min(locked_at)) * 1000000, 0)::bigint
FROM {{table}}
WHERE status = 'DELIVERING'
GROUP BY locked_by
ORDER BY count(*) DESC, locked_by
