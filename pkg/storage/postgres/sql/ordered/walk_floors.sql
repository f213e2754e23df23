{% define "walk_floors" -%}
-- The walk over keys of claim_ordered.sql that starts each key where the
-- relay knows its events that are not DELIVERED begin (keys.go). Every
-- delivered event leaves two dead entries in key_seq_idx (its PENDING and
-- DELIVERING versions), which vacuum may not remove while an older
-- snapshot lives; the index walk (walk_index.sql) passes over all of them
-- at every step from one key to the next. This walk is given the keys
-- instead: $3 the keys the relay knows to have unfinished events, in walk
-- order (after the cursor, then around), and $7 each one's floor, a seq
-- below which the key has no event that is not DELIVERED (DEAD ones
-- included: one retried lies above its key's floor, where this walk finds
-- it before the key's later events). Each key's first unfinished event
-- after its floor is its head, as the index walk finds it.
--
-- The walk is a recursive query so that it stops, key by key, once the
-- batch is full, and can be read twice: for the runs it claims, and for
-- what the relay learns of each key it visited (the rows claim_ordered.sql
-- adds under .Floors: the seq of the first event after the floor that is
-- not DELIVERED, the head's or a DEAD one's before it, and whether there
-- is a head). $6 is the fresh bound as in walk_index.sql (every seq: the
-- relay uses this walk only when it claims every fresh row).
--
-- A run takes only rows the relay's key frontier has read (keys.go): $8,
-- $9 the furthest place in writer order its reads have reached, and $10,
-- $11 the writers it watches, each with the highest seq of its rows read.
-- A row it has not read may belong to a transaction that also wrote an
-- earlier event of the key below its floor, one that committed after the
-- read before this claim or that the reads have not reached; the read
-- that meets it lowers the floor below that earlier event first.
candidates AS MATERIALIZED (
    -- The keys and their floors as arrays, which the walk indexes step by
    -- step: computed once (not inlined into every step).
    SELECT $3::text[] AS ks, $7::bigint[] AS floors,
           $8::text::xid8 AS read_writer, $9::bigint AS read_seq,
           $10::text[]::xid8[] AS watched, $11::bigint[] AS watched_seq
), walk AS (
    SELECT 0 AS i, NULL::text AS k, NULL::bigint AS head, NULL::bigint AS dead, 0::bigint AS n, 0::bigint AS taken
    UNION ALL
    SELECT w.i + 1, c.ks[w.i + 1], h.seq, d.seq, coalesce(r.n, 0), w.taken + coalesce(r.n, 0)
    FROM walk w
    CROSS JOIN candidates c
    LEFT JOIN LATERAL (
        SELECT partition_key COLLATE "C" AS k, status, available_at, seq, created_at
        FROM {{table}}
        WHERE partition_key COLLATE "C" = c.ks[w.i + 1] AND seq > c.floors[w.i + 1]
          AND status IN ('PENDING', 'DELIVERING')
        ORDER BY seq
        LIMIT 1
    ) h ON true
    LEFT JOIN LATERAL (
        -- A DEAD event before the head (key_dead_seq_idx): the floor
        -- stays below it.
        SELECT seq
        FROM {{table}}
        WHERE partition_key COLLATE "C" = c.ks[w.i + 1] AND seq > c.floors[w.i + 1]
          AND status = 'DEAD' AND (h.seq IS NULL OR seq < h.seq)
        ORDER BY seq
        LIMIT 1
    ) d ON true
    LEFT JOIN LATERAL (
        -- How many of the key's events from its head on are due, in a
        -- row: at most $5 and what the batch has left.
        SELECT count(*) FILTER (WHERE x.due) AS n
        FROM (
            SELECT bool_and(status = 'PENDING' AND available_at <= now() AND clear AND read)
                       OVER (ORDER BY seq ROWS UNBOUNDED PRECEDING) AS due
            FROM (
                SELECT status, available_at, seq, {% if .Block %}NOT EXISTS (
          SELECT 1 FROM {{table}} d
          WHERE d.status = 'DEAD' AND d.partition_key COLLATE "C" = h.k
            AND d.seq < run.seq){% else %}true{% end %} AS clear,
                       ({{writer}}, seq) <= (c.read_writer, c.read_seq)
                       AND COALESCE(seq <= c.watched_seq[array_position(c.watched, {{writer}})], true) AS read
                FROM {{table}} run
                WHERE partition_key COLLATE "C" = h.k AND seq >= h.seq
                  AND status IN ('PENDING', 'DELIVERING')
                ORDER BY seq
                LIMIT least($5, (SELECT n FROM room) - w.taken)
            ) run
        ) x
        WHERE h.status = 'PENDING' AND h.available_at <= now()
          AND (h.seq <= {{fresh_to}} OR h.available_at > h.created_at)
          {% if .Block %}AND NOT EXISTS (
          SELECT 1 FROM {{table}} d
          WHERE d.status = 'DEAD' AND d.partition_key COLLATE "C" = h.k
            AND d.seq < h.seq){% end %}
    ) r ON true
    WHERE w.i < cardinality(c.ks) AND w.taken < (SELECT n FROM room)
), keyed AS (
    -- The runs the walk counted, read again in the same snapshot. pos is
    -- an event's place in its key's run.
    SELECT r.event_id, w.k, r.pos, row_number() OVER (ORDER BY w.i, r.pos) AS rank
    FROM walk w
    CROSS JOIN LATERAL (
        SELECT event_id, row_number() OVER (ORDER BY seq) AS pos
        FROM (
            SELECT event_id, seq
            FROM {{table}}
            WHERE partition_key COLLATE "C" = w.k AND seq >= w.head
              AND status IN ('PENDING', 'DELIVERING')
            ORDER BY seq
            LIMIT w.n
        ) run
    ) r
    WHERE w.n > 0
)
{%- end %}
