-- Whether every transaction of $1 (32-bit xids of transactions that
-- committed recently) is visible to a new snapshot. The log sends a
-- transaction once its commit record is flushed; other sessions see its
-- rows only a moment later (after the synchronous standbys answered, under
-- synchronous replication). An xid is widened to the 64-bit form with the
-- snapshot's epoch: one above the snapshot's xmax in its low half belongs
-- to the epoch before.
WITH snap AS (
    SELECT s, pg_snapshot_xmax(s)::text::bigint AS xmax
    FROM pg_current_snapshot() AS s
)
SELECT coalesce(bool_and(pg_visible_in_snapshot(
           (((snap.xmax >> 32) - CASE WHEN x >= (snap.xmax & 4294967295) THEN 1 ELSE 0 END) * 4294967296 + x)::text::xid8,
           snap.s)), true)
FROM snap, unnest($1::bigint[]) AS x
