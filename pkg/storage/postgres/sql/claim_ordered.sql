-- Claim the keyed part of a batch under ORDERING=partition. An event may be
-- claimed only when every earlier event with its key (in write order: seq)
-- is DELIVERED or — with ORDERING_ON_DEAD=skip — DEAD; a key's events are
-- claimed as a run in order. An empty partition_key counts as no key, like
-- NULL. Under ORDERING_ON_DEAD=block (.Block) the walks stop a key at a
-- DEAD event; under skip they pass it.
--
-- This statement runs in the same transaction as, and after, a statement
-- that takes an advisory lock, so its snapshot sees every claim committed
-- before it: two relays can never both see a key free and claim parts of
-- it. Between the two, the claim of the batch's events without a key
-- (claim_unkeyed: claim_arms.sql's arms for those rows alone) leases what
-- it takes under this transaction's stamp; this statement fills what that
-- left of the batch (room).
--
-- Keys are compared in the "C" collation, the order of the key-order index
-- and of the relay's cursor.
--
-- One of two walks over the keys (the CTEs up to keyed, in sql/ordered/)
-- goes here, by .Floors: walk_index.sql finds the keys in key_seq_idx,
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
-- head the claim may take (storage.FreshEvents.UpTo, or what
-- fresh_lock.sql allows; the database's log delivers the others). $7 is the floors' walk's alone (walk_floors.sql).
WITH RECURSIVE room AS MATERIALIZED (
    -- What the unkeyed claim before this statement left of the batch: its
    -- rows are leased under this transaction's stamp (delivering_idx).
    SELECT $2 - count(*) AS n,
           $4::bigint - coalesce(sum(octet_length(payload) + pg_column_size(headers)), 0) AS bytes,
           count(*) = 0 AS empty
    FROM {{table}}
    WHERE status = 'DELIVERING' AND locked_at = now() AND locked_by = $1
), {% if .Floors %}{% template "walk_floors" . %}{% else %}{% template "walk_index" . %}{% end %}, picked AS (
    SELECT event_id, k, pos, row_number() OVER (ORDER BY rank) AS n
    FROM (SELECT * FROM keyed ORDER BY rank LIMIT (SELECT greatest(n, 0) FROM room)) c
), checked AS (
    -- The rule once more, in terms SQL guarantees whatever plan produced
    -- the picks: a key's picked events must be the first places of its run,
    -- 1, 2, … with no gap. A later place without the ones before it is not
    -- claimed.
    SELECT event_id, n
    FROM (SELECT event_id, k, pos, n, row_number() OVER (PARTITION BY k ORDER BY pos) AS nth FROM picked) c
    WHERE pos = nth
), sized AS (
    -- The first row is taken however large, unless the unkeyed claim took
    -- some: then this one is cut like any other.
    SELECT event_id, $4::bigint <= 0 OR running <= (SELECT bytes FROM room) OR (m = 1 AND (SELECT empty FROM room)) AS fits
    FROM (SELECT c.event_id,
                 sum(octet_length(t.payload) + pg_column_size(t.headers)) OVER (ORDER BY c.n ROWS UNBOUNDED PRECEDING) AS running,
                 row_number() OVER (ORDER BY c.n) AS m
          FROM checked c JOIN {{table}} t ON t.event_id = c.event_id) s
), claimed AS (
    UPDATE {{table}} AS t
    SET status = 'DELIVERING', locked_by = $1, locked_at = now(), updated_at = now()
    FROM sized
    WHERE sized.fits AND t.event_id = sized.event_id AND t.status = 'PENDING'
    RETURNING t.*
)
-- In write order, as the unordered claim returns them.
-- A created_at of ±infinity (a producer's mistake) reads as NULL: one such
-- row must not fail the claim of the whole batch after it committed. The
-- last two columns: NULL, and how many rows the byte limit cut.
-- The floors' walk adds, last, what it learned of each key it visited.
(SELECT event_id, event_type, coalesce(partition_key, ''), payload, headers, attempts,
        CASE WHEN isfinite(created_at) THEN created_at END, seq, NULL::boolean,
        (SELECT count(*) FROM sized WHERE NOT fits)
 FROM claimed
 ORDER BY seq, event_id)
{%- if .Floors %}
-- The rows the floors' walk adds to the claimed ones, one per key it
-- visited: no event id, the key, the seq of its first event after its
-- floor that is not DELIVERED (NULL: none) where the claimed rows have
-- theirs, and whether it has a head (keys.go reads them); the columns read
-- into plain Go values as the claimed rows have them.
UNION ALL
SELECT NULL, NULL, w.k, NULL, NULL, 0, NULL, least(w.head, w.dead), w.head IS NOT NULL, 0
FROM walk w
WHERE w.i > 0
{%- end %}
