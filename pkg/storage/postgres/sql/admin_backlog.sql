-- The backlog, cheap enough for a metrics scrape every few seconds. Each
-- part filters on a partial index's predicate (status = 'PENDING',
-- status = 'DEAD'), so only waiting and dead rows are read, never the
-- delivered history that makes up most of the table. The oldest age counts
-- only events that are due: one scheduled for next week is not late.
--
-- PENDING rows are read as two ranges: those due again or scheduled
-- (available_at after created_at) in due_at_idx from ($2, $3), and the
-- fresh ones in pending_seq_idx after $1: the lowest due and claim
-- positions of the relays this process runs ('-infinity' and 0 in
-- relay-cli: every row). Behind a position every row was visible to the
-- claims that passed it, so the rows left there are batches at the broker
-- and rows whose transaction committed late, which the next sweep claims;
-- skipping them skips the dead entries every claimed row leaves in the
-- indexes, which vacuum cannot remove while any snapshot is older (a long
-- query, a replica's hot_standby_feedback) and which a count from the
-- start would step over at every reading.
SELECT p.new, p.retrying, p.oldest,
       coalesce(extract(epoch FROM now() - p.oldest) * 1000000, 0)::bigint,
       (SELECT count(*) FROM {{table}} WHERE status = 'DEAD')
FROM (
    SELECT count(*) FILTER (WHERE attempts = 0) AS new,
           count(*) FILTER (WHERE attempts > 0) AS retrying,
           min(created_at) FILTER (WHERE available_at <= now()) AS oldest
    FROM (
        SELECT attempts, created_at, available_at FROM {{table}}
        WHERE status = 'PENDING' AND available_at > created_at
          AND (available_at, seq) >= ($2::timestamptz, $3::bigint)
        UNION ALL
        SELECT attempts, created_at, available_at FROM {{table}}
        WHERE status = 'PENDING' AND seq > $1::bigint AND available_at <= created_at
    ) AS pending
) AS p
