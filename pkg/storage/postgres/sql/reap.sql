-- Take back expired leases: at most $2 older than $1 microseconds, oldest
-- first. The expired lease counts as an attempt; rows that already have $3
-- attempts (storage.ReapParams.DeadFrom, where the limit is worked out) go
-- DEAD, the others PENDING. SKIP LOCKED lets any number of reapers run at
-- once, and a row settled meanwhile no longer matches.
WITH expired AS (
    SELECT event_id
    FROM {{table}}
    WHERE status = 'DELIVERING' AND locked_at < now() - $1 * interval '1 microsecond'
    ORDER BY locked_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), reaped AS (
    UPDATE {{table}} AS t
    SET status = CASE WHEN t.attempts >= $3 THEN 'DEAD' ELSE 'PENDING' END,
        attempts = t.attempts + 1,
        last_error = 'lease expired (relay ' || coalesce(t.locked_by, 'unknown') || ')',
        available_at = {{due_now}}, {{handed_back}}, locked_by = NULL, locked_at = NULL, updated_at = now()
    FROM expired
    WHERE t.event_id = expired.event_id AND t.status = 'DELIVERING'
    RETURNING t.status
)
SELECT count(*) FILTER (WHERE status = 'PENDING'), count(*) FILTER (WHERE status = 'DEAD')
FROM reaped
