-- Claim a batch under a lease: move the rows claim_arms.sql picks to
-- DELIVERING under one stamp (relay $1, now()). Rows past the byte limit
-- come back too, untaken and without payload, and are free again when the
-- statement commits: the relay watches their writers (frontier.go). The
-- last row, without an event id, carries the statement's snapshot, by
-- which the relay moves its frontier. The batch comes back in write order
-- (seq), so that events sharing a key are published in the order they were
-- written.
{% template "claim_arms" . %}, claimed AS (
    UPDATE {{table}} AS t
    SET status = 'DELIVERING', locked_by = $1, locked_at = now(), updated_at = now()
    FROM locked AS picked
    -- created_at too: on a table partitioned by it, so that the row can be
    -- found in its partition alone.
    WHERE picked.taken AND t.event_id = picked.event_id AND t.created_at = picked.created_at
    RETURNING t.event_id, t.event_type, t.partition_key, t.payload, t.headers, t.attempts,
              t.created_at, t.seq, picked.arm, picked.available_at, picked.writer
)
-- A created_at of ±infinity (a producer's mistake) reads as NULL: one such
-- row must not fail the claim of the whole batch after it committed.
SELECT event_id, event_type, coalesce(partition_key, ''), payload, headers, attempts,
       CASE WHEN isfinite(created_at) THEN created_at END, seq,
       arm, CASE WHEN arm = 0 THEN available_at END, writer::text::bigint, true
FROM claimed
UNION ALL
SELECT event_id, event_type, coalesce(partition_key, ''), NULL, NULL, attempts,
       CASE WHEN isfinite(created_at) THEN created_at END, seq,
       arm, CASE WHEN arm = 0 THEN available_at END, writer::text::bigint, false
FROM locked
WHERE NOT taken
UNION ALL
SELECT NULL, 'snapshot ' || pg_current_snapshot()::text, '', NULL, NULL, 0, NULL, NULL, NULL, NULL, NULL, false
UNION ALL
SELECT NULL, fact, '', NULL, NULL, 0, NULL, seq, NULL, due_at, writer::text::bigint, false
FROM skipped
ORDER BY 8, 1
