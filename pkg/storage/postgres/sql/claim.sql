-- Claim a batch: lock due PENDING rows that no other relay is claiming and
-- move them to DELIVERING under one lease (relay id + now()).
WITH picked AS (
    SELECT event_id
    FROM {{table}}
    WHERE status = 'PENDING' AND available_at <= now()
    ORDER BY available_at, created_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE {{table}} AS t
SET status = 'DELIVERING', locked_by = $1, locked_at = now(), updated_at = now()
FROM picked
WHERE t.event_id = picked.event_id
RETURNING t.event_id, t.event_type, coalesce(t.partition_key, ''), t.payload, t.headers,
          t.attempts, t.created_at, coalesce(t.seq, 0), t.locked_at
