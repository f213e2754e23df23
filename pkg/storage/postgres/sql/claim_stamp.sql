-- The lease stamp of the claim that follows in the same pipeline (one
-- implicit transaction, so the same now()): known before the claimed rows
-- are read, so that rows leased by a claim whose answer is lost halfway can
-- be handed back at once. With it, the oldest transaction that may still
-- be running apart from the relay's own held claims ($1): the relay moves
-- its claim position past the rows written before an earlier claim once
-- that claim's own transaction id (claim_xid.sql) is no later than it.
-- The snapshot lists the running transactions below its xmax; those from
-- xmax on it does not list, so the first id from xmax on that is not one
-- of $1 may be running. Last, the highest seq handed out so far: a relay
-- whose claims find nothing (others claim it all) moves its position up
-- to it instead of stepping over the same claimed rows at every poll.
-- NULL where the relay's role may not read the sequence (grants from
-- before it needed to).
--
-- $1 are the ids of the relay's own held claims (LEASE_MODE=lock), open
-- while their batches are at the broker: they write no new rows, so they
-- are left out. Every id between xmax and a held claim's is running (an
-- ended one would have moved xmax past it): when those are all the
-- relay's own, no other transaction below them is.
SELECT now(),
       least((SELECT min(x::text::bigint) FROM pg_snapshot_xip(pg_current_snapshot()) AS x
              WHERE x::text::bigint <> ALL(coalesce($1::bigint[], '{}'))),
             (SELECT min(n) FROM generate_series(pg_snapshot_xmax(pg_current_snapshot())::text::bigint,
                                                 pg_snapshot_xmax(pg_current_snapshot())::text::bigint
                                                   + cardinality(coalesce($1::bigint[], '{}'))) AS n
              WHERE n <> ALL(coalesce($1::bigint[], '{}')))),
       CASE WHEN has_sequence_privilege('{{schema}}"{{name}}_seq"', 'SELECT')
            THEN pg_sequence_last_value('{{schema}}"{{name}}_seq"') END
