-- The lease stamp of the claim that follows in the same pipeline (one
-- implicit transaction, so the same now()): known before the claimed rows
-- are read, so that rows leased by a claim whose answer is lost halfway can
-- be handed back at once. With it, for ordered claims, the oldest
-- transaction that may still be running: the relay moves its claim
-- position past the rows written before an earlier claim once that
-- claim's own transaction id (claim_xid.sql) is no later than it. Last,
-- the highest seq handed out so far: a relay whose ordered claims find
-- nothing (others claim it all) moves its position up to it instead of
-- stepping over the same claimed rows at every poll. NULL where the
-- relay's role may not read the sequence (grants from before it needed
-- to). Unordered claims use the stamp alone (frontier.go): $1 false
-- leaves the sequence unread (NULL).
SELECT now(), pg_snapshot_xmin(pg_current_snapshot())::text::bigint,
       CASE WHEN $1::boolean AND has_sequence_privilege('{{schema}}"{{name}}_seq"', 'SELECT')
            THEN pg_sequence_last_value('{{schema}}"{{name}}_seq"') END
