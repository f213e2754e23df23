-- Claim a batch: lock due PENDING rows that no other relay is claiming and
-- move them to DELIVERING under one lease (relay id + now()). The batch comes
-- back oldest first, ties (one transaction's events) in insertion order, so
-- that events sharing a key are published in the order they were written.
--
-- $1 relay id, $2 most events, $3 most bytes (payload + headers; 0: no
-- limit). The byte limit cuts the batch after the last event that fits;
-- the first event is always taken, however large, so none is stuck.
WITH locked AS (
    SELECT event_id, available_at, created_at, octet_length(payload) + pg_column_size(headers) AS size
    FROM {{table}}
    WHERE status = 'PENDING' AND available_at <= now()
    ORDER BY available_at, created_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), picked AS (
    -- FOR UPDATE does not mix with window functions: the running total is
    -- taken over the locked rows. Rows locked and not picked are free again
    -- when the statement commits.
    SELECT event_id, created_at
    FROM (SELECT event_id, created_at,
                 sum(size) OVER w AS running,
                 row_number() OVER w AS n
          FROM locked
          WINDOW w AS (ORDER BY available_at, created_at, event_id ROWS UNBOUNDED PRECEDING)) s
    WHERE $3::bigint <= 0 OR running <= $3::bigint OR n = 1
), claimed AS (
    UPDATE {{table}} AS t
    SET status = 'DELIVERING', locked_by = $1, locked_at = now(), updated_at = now()
    FROM picked
    -- created_at too: on a table partitioned by it, so that the row can be
    -- found in its partition alone.
    WHERE t.event_id = picked.event_id AND t.created_at = picked.created_at
    RETURNING t.*
)
-- A created_at of ±infinity (a producer's mistake) reads as NULL: one such
-- row must not fail the claim of the whole batch after it committed.
SELECT event_id, event_type, coalesce(partition_key, ''), payload, headers, attempts,
       CASE WHEN isfinite(created_at) THEN created_at END
FROM claimed
ORDER BY created_at, seq NULLS FIRST, event_id
