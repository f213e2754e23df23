-- Claim a batch: lock due PENDING rows that no other relay is claiming and
-- move them to DELIVERING under one lease (relay id + now()). The batch comes
-- back in write order (seq), so that events sharing a key are published in
-- the order they were written.
--
-- Rows are looked for in two places, neither of which holds the dead row
-- versions that earlier claims left behind (vacuum cannot remove them
-- while any snapshot is older, and a claim that stepped over them would
-- slow down with every event ever claimed):
--   fresh  rows written after $4, the relay's claim position: every row at
--          or below it is settled, claimed by someone, or left to the
--          periodic sweep, which runs this same statement with a position
--          further back;
--   again  rows that became PENDING again (released, retried, reaped,
--          retried from DEAD) and scheduled events: their available_at is
--          after their created_at, and the due index holds only those. It
--          is read in its order, (available_at, seq), from ($6, $7), the
--          relay's due position (position.go): the rows before it were
--          claimed or are left to the sweep.
-- The rows due again are taken first, in that order, so that those the
-- batch takes are the first of the due index after ($6, $7): the relay
-- moves its due position to the last of them.
--
-- $1 relay id, $2 most events, $3 most bytes (payload + headers; 0: no
-- limit), $4 the claim position (a seq), $5 the highest seq of a fresh row
-- the claim may take (storage.ClaimParams.FreshTo: below $4 when the
-- database's log delivers fresh rows), $6 and $7 the due position
-- ('-infinity' and 0: the beginning). The byte limit cuts the batch after
-- the last event that fits; the first event is always taken, however large,
-- so none is stuck.
WITH again AS (
    SELECT event_id, seq, created_at, available_at, octet_length(payload) + pg_column_size(headers) AS size
    FROM {{table}}
    WHERE status = 'PENDING' AND available_at > created_at AND available_at <= now()
      AND (available_at, seq) >= ($6::timestamptz, $7::bigint)
    ORDER BY available_at, seq
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), fresh AS (
    SELECT event_id, seq, created_at, available_at, octet_length(payload) + pg_column_size(headers) AS size
    FROM {{table}}
    WHERE status = 'PENDING' AND seq > $4::bigint AND seq <= $5::bigint AND available_at <= now()
    ORDER BY seq
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), sized AS (
    -- FOR UPDATE does not mix with window functions: the running total is
    -- taken over the locked rows. Rows locked and not picked are free again
    -- when the statement commits. arm is 0 for the rows read as due again.
    SELECT event_id, created_at, arm, $3::bigint <= 0 OR running <= $3::bigint OR n = 1 AS fits
    FROM (SELECT event_id, created_at, arm,
                 sum(size) OVER w AS running,
                 row_number() OVER w AS n
          FROM (SELECT *, 0 AS arm FROM again
                UNION ALL
                SELECT *, 1 FROM fresh WHERE event_id NOT IN (SELECT event_id FROM again)) locked
          WINDOW w AS (ORDER BY arm, CASE WHEN arm = 0 THEN available_at END, seq, event_id
                       ROWS UNBOUNDED PRECEDING)) s
    WHERE n <= $2
), claimed AS (
    UPDATE {{table}} AS t
    SET status = 'DELIVERING', locked_by = $1, locked_at = now(), updated_at = now()
    FROM sized AS picked
    -- created_at too: on a table partitioned by it, so that the row can be
    -- found in its partition alone.
    WHERE picked.fits AND t.event_id = picked.event_id AND t.created_at = picked.created_at
    RETURNING t.*, picked.arm
)
-- A created_at of ±infinity (a producer's mistake) reads as NULL: one such
-- row must not fail the claim of the whole batch after it committed. seq,
-- whether the row came back to PENDING (the due index's condition), the
-- available_at of a row read from the due index, how many rows that read
-- locked and how many rows the byte limit cut come last: the relay moves
-- its positions with them (a batch cut short did not read every row due).
SELECT event_id, event_type, coalesce(partition_key, ''), payload, headers, attempts,
       CASE WHEN isfinite(created_at) THEN created_at END, seq, available_at > created_at,
       CASE WHEN arm = 0 THEN available_at END, (SELECT count(*) FROM again),
       (SELECT count(*) FROM sized WHERE NOT fits)
FROM claimed
ORDER BY seq, event_id
