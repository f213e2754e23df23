-- Claim a batch under ORDERING=partition. An event may be claimed only when
-- every earlier event with its key (by created_at, then seq) is DELIVERED
-- (or, with ORDERING_ON_DEAD=skip, DEAD); events of one key are claimed as a
-- run in order. {{holding}} lists the statuses that hold a key back. An empty
-- partition_key counts as no key, like NULL.
--
-- This statement runs in a transaction that first takes an advisory lock,
-- so its snapshot sees every claim committed before it: two relays can
-- never both see a key free and claim parts of it.
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
), keyed AS (
    -- For each key whose first event is due, the run of due PENDING events
    -- from the start, stopping at the first that is not.
    SELECT r.event_id, r.pos
    FROM heads h
    CROSS JOIN LATERAL (
        SELECT x.event_id, x.pos
        FROM (
            SELECT event_id,
                   row_number() OVER w AS pos,
                   bool_and(status = 'PENDING' AND available_at <= now()) OVER w AS due
            FROM (
                SELECT event_id, status, available_at, created_at, seq
                FROM {{table}}
                WHERE partition_key = h.k AND status IN ({{holding}})
                ORDER BY created_at, seq
                LIMIT $2
            ) run
            WINDOW w AS (ORDER BY created_at, seq ROWS UNBOUNDED PRECEDING)
        ) x
        WHERE x.due
    ) r
    WHERE h.status = 'PENDING' AND h.available_at <= now()
    LIMIT $2
), unkeyed AS (
    SELECT event_id, row_number() OVER (ORDER BY available_at, created_at) AS pos
    FROM (
        SELECT event_id, available_at, created_at
        FROM {{table}}
        WHERE status = 'PENDING' AND (partition_key IS NULL OR partition_key = '')
          AND available_at <= now()
        ORDER BY available_at, created_at
        LIMIT $2
    ) u
), picked AS (
    -- Interleave: every key's first event before any key's second, so one
    -- long run cannot crowd out the rest.
    SELECT event_id
    FROM (SELECT event_id, pos FROM keyed UNION ALL SELECT event_id, pos FROM unkeyed) c
    ORDER BY pos
    LIMIT $2
)
UPDATE {{table}} AS t
SET status = 'DELIVERING', locked_by = $1, locked_at = now(), updated_at = now()
FROM picked
WHERE t.event_id = picked.event_id AND t.status = 'PENDING'
RETURNING t.event_id, t.event_type, coalesce(t.partition_key, ''), t.payload, t.headers,
          t.attempts, t.created_at, coalesce(t.seq, 0), t.locked_at
