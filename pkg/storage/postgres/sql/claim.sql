-- Claim a batch: lock due PENDING rows that no other relay is claiming and
-- move them to DELIVERING under one lease (relay id + now()). The batch comes
-- back oldest first, ties (one transaction's events) in insertion order, so
-- that events sharing a key are published in the order they were written.
WITH picked AS (
    SELECT event_id
    FROM {{table}}
    WHERE status = 'PENDING' AND available_at <= now()
    ORDER BY available_at, created_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE {{table}} AS t
    SET status = 'DELIVERING', locked_by = $1, locked_at = now(), updated_at = now()
    FROM picked
    WHERE t.event_id = picked.event_id
    RETURNING t.*
)
-- A created_at of ±infinity (a producer's mistake) reads as NULL: one such
-- row must not fail the claim of the whole batch after it committed.
SELECT event_id, event_type, coalesce(partition_key, ''), payload, headers, attempts,
       CASE WHEN isfinite(created_at) THEN created_at END
FROM claimed
ORDER BY created_at, seq NULLS FIRST, event_id
