-- The relays holding DELIVERING rows now, with their oldest lease and its
-- age at the snapshot's instant (the argument): a lease far older than
-- LEASE_TIMEOUT means no reaper is running.
SELECT COALESCE(locked_by, ''), COUNT(*), MIN(locked_at),
       COALESCE(TIMESTAMPDIFF(MICROSECOND, MIN(locked_at), CAST(? AS DATETIME(6))), 0)
FROM {{table}} FORCE INDEX (`{{name}}_state_seq_idx`)
WHERE status = 'DELIVERING'
GROUP BY locked_by
ORDER BY COUNT(*) DESC, locked_by IS NULL, locked_by
