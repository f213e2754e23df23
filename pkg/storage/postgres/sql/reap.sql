-- Take back expired leases. A lease that expired counts as a failed attempt,
-- so an event that crashes every relay that claims it ends DEAD instead of
-- looping forever. SKIP LOCKED lets any number of reapers run at once, and a
-- row settled meanwhile no longer matches.
WITH expired AS (
    SELECT event_id
    FROM {{table}}
    WHERE status = 'DELIVERING' AND locked_at < now() - $1 * interval '1 microsecond'
    ORDER BY locked_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), reaped AS (
    UPDATE {{table}} AS t
    SET status = CASE WHEN t.attempts + 1 >= $3 THEN 'DEAD' ELSE 'PENDING' END,
        attempts = t.attempts + 1,
        last_error = 'lease expired (relay ' || coalesce(t.locked_by, 'unknown') || ')',
        available_at = now(), locked_by = NULL, locked_at = NULL, updated_at = now()
    FROM expired
    WHERE t.event_id = expired.event_id AND t.status = 'DELIVERING'
    RETURNING t.status
)
SELECT count(*) FILTER (WHERE status = 'PENDING'), count(*) FILTER (WHERE status = 'DEAD')
FROM reaped
