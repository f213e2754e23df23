-- Claim a batch under ORDERING=partition. An event may be claimed only when
-- every earlier event with its key (by created_at, then seq) is DELIVERED
-- (or, with ORDERING_ON_DEAD=skip, DEAD); events of one key are claimed as a
-- run in order. {{holding}} lists the statuses that hold a key back. An empty
-- partition_key counts as no key, like NULL.
--
-- This statement runs in the same transaction as, and right after, a
-- statement that takes an advisory lock, so its snapshot sees every claim
-- committed before it: two relays can never both see a key free and claim
-- parts of it.
--
-- $1 relay id, $2 batch size, $3 cursor: the last key the previous claim
-- took ('' at first). The walk over keys starts after it and wraps around, so every key
-- gets its turn.
WITH RECURSIVE after_cursor AS (
    (SELECT partition_key AS k, status, available_at
     FROM {{table}}
     WHERE status IN ({{holding}}) AND partition_key > $3
     ORDER BY partition_key, created_at, seq
     LIMIT 1)
    UNION ALL
    SELECT nxt.k, nxt.status, nxt.available_at
    FROM after_cursor w
    CROSS JOIN LATERAL (
        SELECT partition_key AS k, status, available_at
        FROM {{table}}
        WHERE status IN ({{holding}}) AND partition_key > w.k
        ORDER BY partition_key, created_at, seq
        LIMIT 1
    ) nxt
), up_to_cursor AS (
    (SELECT partition_key AS k, status, available_at
     FROM {{table}}
     WHERE status IN ({{holding}}) AND partition_key > ''
     ORDER BY partition_key, created_at, seq
     LIMIT 1)
    UNION ALL
    SELECT nxt.k, nxt.status, nxt.available_at
    FROM up_to_cursor w
    CROSS JOIN LATERAL (
        SELECT partition_key AS k, status, available_at
        FROM {{table}}
        WHERE status IN ({{holding}}) AND partition_key > w.k
        ORDER BY partition_key, created_at, seq
        LIMIT 1
    ) nxt
    WHERE w.k < $3
), heads AS (
    -- Each row is a key and its first unfinished event.
    SELECT k, status, available_at FROM after_cursor
    UNION ALL
    SELECT k, status, available_at FROM up_to_cursor WHERE k <= $3
), due_heads AS (
    -- Keys whose first unfinished event is due, in walk order.
    SELECT k FROM heads WHERE status = 'PENDING' AND available_at <= now()
), keyed AS (
    -- For each of those keys, the run of due PENDING events from the start,
    -- stopping at the first that is not, and at 20 events. A batch then
    -- holds whole runs of a few keys when keys have long backlogs, leaving
    -- other keys for the next claim while this batch is at the broker, and
    -- many keys when each has few events. The walk stops as soon as the
    -- batch is full.
    SELECT event_id, row_number() OVER () AS rank
    FROM (
        SELECT r.event_id
        FROM due_heads h
        CROSS JOIN LATERAL (
            SELECT x.event_id
            FROM (
                SELECT event_id,
                       bool_and(status = 'PENDING' AND available_at <= now())
                           OVER (ORDER BY created_at, seq ROWS UNBOUNDED PRECEDING) AS due
                FROM (
                    SELECT event_id, status, available_at, created_at, seq
                    FROM {{table}}
                    WHERE partition_key = h.k AND status IN ({{holding}})
                    ORDER BY created_at, seq
                    LIMIT 20
                ) run
            ) x
            WHERE x.due
        ) r
        LIMIT $2
    ) walked
), unkeyed AS (
    SELECT event_id, row_number() OVER (ORDER BY available_at, created_at) AS rank
    FROM (
        SELECT event_id, available_at, created_at
        FROM {{table}}
        WHERE status = 'PENDING' AND (partition_key IS NULL OR partition_key = '')
          AND available_at <= now()
        ORDER BY available_at, created_at
        LIMIT $2
    ) u
), picked AS (
    -- Keyed and unkeyed events alternate, so neither crowds out the other.
    SELECT event_id
    FROM (SELECT event_id, rank FROM keyed UNION ALL SELECT event_id, rank FROM unkeyed) c
    ORDER BY rank
    LIMIT $2
)
UPDATE {{table}} AS t
SET status = 'DELIVERING', locked_by = $1, locked_at = now(), updated_at = now()
FROM picked
WHERE t.event_id = picked.event_id AND t.status = 'PENDING'
RETURNING t.event_id, t.event_type, coalesce(t.partition_key, ''), t.payload, t.headers,
          t.attempts, t.created_at, coalesce(t.seq, 0), t.locked_at
