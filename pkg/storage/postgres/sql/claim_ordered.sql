-- Claim a batch under ORDERING=partition. An event may be claimed only when
-- every earlier event with its key (in write order: seq) is
-- DELIVERED or — with ORDERING_ON_DEAD=skip — DEAD; a key's events are
-- claimed as a run in order. An empty partition_key counts as no key, like
-- NULL. Under ORDERING_ON_DEAD=block the driver fills in two conditions
-- that stop a key at a DEAD event (marked dead_holds_head and
-- no_dead_before_row below); under skip they are empty and true.
--
-- This statement runs in the same transaction as, and right after, a
-- statement that takes an advisory lock, so its snapshot sees every claim
-- committed before it: two relays can never both see a key free and claim
-- parts of it.
--
-- Keys are compared in the "C" collation, the order of the key-order index
-- and of the relay's cursor.
--
-- The driver fills in one of two walks over the keys (the CTEs up to keyed, in
-- sql/ordered/): walk_index.sql finds the keys in key_seq_idx,
-- walk_floors.sql visits the keys the relay passes. Either ends in keyed:
-- the runs to claim, in walk order. The walk over keys starts after the
-- cursor and wraps around, so every key gets its turn; the driver works
-- out where the next claim's walk starts from the keys this one returns
-- (Batch.After).
--
-- $1 relay id, $2 batch size, $3 the walk's: the cursor (the last key the
-- previous claim took, '' at first) or the keys. $4 most bytes (payload +
-- headers; 0: no limit), cut as in the unordered claim: in pick order,
-- which keeps each key's picks a prefix of its run. $5 most events of one
-- key (storage.ClaimParams.RunLimit). $6 the highest seq of a fresh key
-- head or unkeyed row the claim may take (storage.ClaimParams.FreshTo; the
-- database's log delivers the others). $7 the relay's position for events
-- without a key (position.go): fresh ones are read after it, so that the
-- dead entries every delivered one leaves in unkeyed_seq_idx, which vacuum
-- cannot remove while an older snapshot lives, are not stepped over again.
-- $8 and $9 the relay's due position for them ('-infinity' and 0: the
-- beginning), where the ones due again are read from. $10 to $13 are the
-- floors' walk's alone (walk_floors.sql).
WITH RECURSIVE {{keyed_walk}}, unkeyed_due AS (
    -- Events without a key that are due again, from due_at_idx, in its
    -- order from the relay's due position ($8, $9). The key's test is
    -- spelled so that it does not match unkeyed_seq_idx's predicate: read
    -- through that index, as the planner would, it steps over every dead
    -- entry.
    SELECT event_id, seq, available_at
    FROM {{table}}
    WHERE status = 'PENDING' AND coalesce(partition_key, '') = ''
      AND available_at > created_at AND available_at <= now()
      AND (available_at, seq) >= ($8::timestamptz, $9::bigint)
    ORDER BY available_at, seq
    LIMIT $2
), unkeyed AS (
    -- Those due again first, in the due index's order, then the fresh ones
    -- in seq order, so that what a batch takes is a prefix of each: every
    -- fresh row up to the highest it took is taken, or was not visible, and
    -- every due row up to the last it took. due_at is set for the former.
    -- Fresh rows only fill what the due ones left: when producers set
    -- created_at themselves every row is due, and a walk for fresh ones
    -- would step over all of them to find none.
    SELECT event_id, NULL::text AS k, 0::bigint AS pos,
           row_number() OVER (ORDER BY due_at IS NULL, due_at, seq) AS rank, due_at
    FROM (
        SELECT event_id, seq, due_at
        FROM (
            SELECT event_id, seq, available_at AS due_at FROM unkeyed_due
            UNION ALL
            (SELECT event_id, seq, NULL::timestamptz
             FROM {{table}}
             WHERE status = 'PENDING' AND (partition_key IS NULL OR partition_key = '')
               AND seq > $7::bigint AND seq <= $6::bigint
               AND available_at <= now() AND available_at <= created_at
             ORDER BY seq
             LIMIT greatest($2 - (SELECT count(*) FROM unkeyed_due), 0))
        ) both_sets
        ORDER BY due_at IS NULL, due_at, seq
        LIMIT $2
    ) u
), picked AS (
    -- Keyed and unkeyed events alternate, so neither crowds out the other.
    SELECT event_id, k, pos, due_at, row_number() OVER (ORDER BY rank) AS n
    FROM (SELECT * FROM keyed UNION ALL SELECT * FROM unkeyed ORDER BY rank LIMIT $2) c
), checked AS (
    -- The rule once more, in terms SQL guarantees whatever plan produced
    -- the picks: a key's picked events must be the first places of its run,
    -- 1, 2, … with no gap. A later place without the ones before it is not
    -- claimed.
    SELECT event_id, n, due_at
    FROM (SELECT event_id, k, pos, n, due_at, row_number() OVER (PARTITION BY k ORDER BY pos) AS nth FROM picked) c
    WHERE k IS NULL OR pos = nth
), sized AS (
    SELECT event_id, due_at, $4::bigint <= 0 OR running <= $4::bigint OR m = 1 AS fits
    FROM (SELECT c.event_id, c.due_at,
                 sum(octet_length(t.payload) + pg_column_size(t.headers)) OVER (ORDER BY c.n ROWS UNBOUNDED PRECEDING) AS running,
                 row_number() OVER (ORDER BY c.n) AS m
          FROM checked c JOIN {{table}} t ON t.event_id = c.event_id) s
), claimed AS (
    UPDATE {{table}} AS t
    SET status = 'DELIVERING', locked_by = $1, locked_at = now(), updated_at = now()
    FROM sized
    WHERE sized.fits AND t.event_id = sized.event_id AND t.status = 'PENDING'
    RETURNING t.*, sized.due_at
)
-- In write order, as the unordered claim returns them.
-- A created_at of ±infinity (a producer's mistake) reads as NULL: one such
-- row must not fail the claim of the whole batch after it committed. The
-- last three columns, as in claim.sql, are for the relay's positions.
-- The floors' walk adds, last, what it learned of each key it visited.
(SELECT event_id, event_type, coalesce(partition_key, ''), payload, headers, attempts,
        CASE WHEN isfinite(created_at) THEN created_at END, seq, available_at > created_at,
        due_at, (SELECT count(*) FROM unkeyed_due),
        (SELECT count(*) FROM sized WHERE NOT fits)
 FROM claimed
 ORDER BY seq, event_id)
{{walk_info}}
