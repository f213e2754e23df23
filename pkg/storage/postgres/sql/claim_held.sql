-- Claim a batch under row locks (LEASE_MODE=lock): the claim's transaction
-- stays open while the batch is at the broker, and records its outcome and
-- commits (held_*.sql). The rows claim_arms.sql picks stay PENDING; the
-- locks keep other claims away (they skip locked rows) and end with the
-- transaction, also when the relay dies. Every locked row comes back; those
-- past the byte limit without payload and headers, untaken: they stay as
-- they are, PENDING, and the relay watches their writers until this
-- transaction has ended and a claim has looked at them again
-- (frontier.go). Each row comes back with its physical address (its table,
-- a partition on a partitioned table, and its ctid there), where the
-- settling statements find it: no other statement can move a row while
-- this transaction holds it. The last row, without an event id,
-- carries the statement's snapshot. $1, the relay id, names no lease here.
{% template "claim_arms" . %}
SELECT event_id, event_type, coalesce(partition_key, ''),
       CASE WHEN taken THEN payload END, CASE WHEN taken THEN headers END, attempts,
       CASE WHEN isfinite(created_at) THEN created_at END, seq,
       arm, CASE WHEN arm = 0 THEN available_at END, writer::text::bigint, taken, row_id, row_table
FROM locked
WHERE $1::text IS NOT NULL
UNION ALL
SELECT NULL, 'snapshot ' || pg_current_snapshot()::text, '', NULL, NULL, 0, NULL, NULL, NULL, NULL, NULL, false, NULL, NULL
UNION ALL
SELECT NULL, fact, '', NULL, NULL, 0, NULL, seq, NULL, due_at, writer::text::bigint, false, NULL, NULL
FROM skipped
ORDER BY 8, 1
