{% define "walk_index" -%}
-- The walk over keys of claim_ordered.sql that finds the keys from
-- key_seq_idx: it goes through the index key by key, from the cursor ($3,
-- the last key the previous claim took) on and around, and takes each
-- key's first unfinished event. It needs nothing from the relay but the
-- cursor. Claims use it while the database's log delivers the fresh rows
-- (storage.FreshEvents), and while a relay has more keys waiting than it passes
-- (keys.go); under a long-lived snapshot each key's step passes over the
-- dead index entries that each of its delivered events left (see
-- walk_floors.sql).
-- $6 is the highest seq of a fresh event the claim may take
-- (storage.FreshEvents.UpTo, or what fresh_lock.sql allows: queries.go,
-- freshRule; the database's log delivers the others),
-- head or not: a key whose head is due again is claimed with its run up to
-- the first fresh event that is the log's, which the log publishes, or
-- hands to the claims, in its turn (taken here too, it went twice).
after_cursor AS (
    (SELECT partition_key COLLATE "C" AS k, status, available_at, seq, created_at
     FROM {{table}}
     WHERE status IN ('PENDING', 'DELIVERING') AND partition_key COLLATE "C" > $3
     ORDER BY partition_key COLLATE "C", seq
     LIMIT 1)
    UNION ALL
    SELECT nxt.*
    FROM after_cursor w
    CROSS JOIN LATERAL (
        SELECT partition_key COLLATE "C" AS k, status, available_at, seq, created_at
        FROM {{table}}
        WHERE status IN ('PENDING', 'DELIVERING') AND partition_key COLLATE "C" > w.k
        ORDER BY partition_key COLLATE "C", seq
        LIMIT 1
    ) nxt
), up_to_cursor AS (
    (SELECT partition_key COLLATE "C" AS k, status, available_at, seq, created_at
     FROM {{table}}
     WHERE status IN ('PENDING', 'DELIVERING') AND partition_key COLLATE "C" > ''
     ORDER BY partition_key COLLATE "C", seq
     LIMIT 1)
    UNION ALL
    SELECT nxt.*
    FROM up_to_cursor w
    CROSS JOIN LATERAL (
        SELECT partition_key COLLATE "C" AS k, status, available_at, seq, created_at
        FROM {{table}}
        WHERE status IN ('PENDING', 'DELIVERING') AND partition_key COLLATE "C" > w.k
        ORDER BY partition_key COLLATE "C", seq
        LIMIT 1
    ) nxt
    WHERE w.k < $3
), heads AS (
    -- Each row is a key and its first unfinished event.
    SELECT * FROM after_cursor
    UNION ALL
    SELECT * FROM up_to_cursor WHERE k <= $3
), due_heads AS (
    -- Keys whose first unfinished event is due, in walk order.
    SELECT h.k
    FROM heads h
    WHERE h.status = 'PENDING' AND h.available_at <= now()
      AND (h.seq <= {{fresh_to}} OR h.available_at > h.created_at)
      {% if .Block %}AND NOT EXISTS (
          SELECT 1 FROM {{table}} d
          WHERE d.status = 'DEAD' AND d.partition_key COLLATE "C" = h.k
            AND d.seq < h.seq){% end %}
), keyed AS (
    -- For each of those keys, the run of due PENDING events from the start,
    -- stopping at the first that is not, and at $5 events. A batch then
    -- holds whole runs of a few keys when keys have long backlogs, leaving
    -- other keys for the next claim while this batch is at the broker, and
    -- many keys when each has few events. The walk stops as soon as the
    -- batch is full. pos is an event's place in its key's run.
    SELECT event_id, k, pos, row_number() OVER () AS rank
    FROM (
        SELECT r.event_id, h.k, r.pos
        FROM due_heads h
        CROSS JOIN LATERAL (
            SELECT x.event_id, x.pos
            FROM (
                SELECT event_id,
                       row_number() OVER w AS pos,
                       bool_and(status = 'PENDING' AND available_at <= now() AND clear
                                AND (seq <= {{fresh_to}} OR available_at > created_at)) OVER w AS due
                FROM (
                    SELECT event_id, status, available_at, created_at, seq,
                           {% if .Block %}NOT EXISTS (
          SELECT 1 FROM {{table}} d
          WHERE d.status = 'DEAD' AND d.partition_key COLLATE "C" = h.k
            AND d.seq < run.seq){% else %}true{% end %} AS clear
                    FROM {{table}} run
                    WHERE partition_key COLLATE "C" = h.k AND status IN ('PENDING', 'DELIVERING')
                    ORDER BY seq
                    LIMIT $5
                ) run
                WINDOW w AS (ORDER BY seq ROWS UNBOUNDED PRECEDING)
            ) x
            WHERE x.due
        ) r
        LIMIT (SELECT n FROM room)
    ) walked
)
{%- end %}
