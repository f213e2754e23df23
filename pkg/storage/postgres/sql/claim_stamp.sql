-- The lease stamp of the claim that follows in the same pipeline (one
-- implicit transaction, so the same now()): known before the claimed rows
-- are read, so that rows leased by a claim whose answer is lost halfway can
-- be handed back at once. With it, the snapshot's oldest running
-- transaction and the next transaction id to be assigned: once every
-- transaction below that next id has ended, every row written before this
-- claim is visible, and the relay may move its claim position past them.
-- Last, the highest seq handed out so far: a relay whose claims find
-- nothing (others claim it all) moves its position up to it instead of
-- stepping over the same claimed rows at every poll. NULL where the
-- relay's role may not read the sequence (grants from before it needed to).
--
-- $1 are the ids of the relay's own held claims (LEASE_MODE=lock), open
-- while their batches are at the broker: they write no new rows, so the
-- oldest running transaction is taken among the others.
SELECT now(),
       coalesce((SELECT min(x::text::bigint) FROM pg_snapshot_xip(pg_current_snapshot()) AS x
                 WHERE x::text::bigint <> ALL(coalesce($1::bigint[], '{}'))),
                pg_snapshot_xmax(pg_current_snapshot())::text::bigint),
       pg_snapshot_xmax(pg_current_snapshot())::text::bigint,
       CASE WHEN has_sequence_privilege('{{schema}}"{{name}}_seq"', 'SELECT')
            THEN pg_sequence_last_value('{{schema}}"{{name}}_seq"') END
