-- Keys whose first unfinished event (in write order, seq) is DEAD while
-- later events wait. Under ORDERING=partition with ORDERING_ON_DEAD=block
-- the relay holds these keys until an operator retries or prunes the DEAD
-- event. The outer scan reads the DEAD range of state_seq_idx, the
-- subqueries key_order_seq_idx. The argument is how many keys to return.
SELECT partition_key, event_id, event_type, waiting
FROM (
    SELECT d.partition_key, d.event_id, d.event_type, d.state_at,
           (SELECT COUNT(*) FROM {{table}} w
            WHERE w.status = 'PENDING' AND w.partition_key = d.partition_key) AS waiting
    FROM {{table}} d FORCE INDEX (`{{name}}_state_seq_idx`)
    WHERE d.status = 'DEAD' AND d.partition_key > ''
      AND NOT EXISTS (
          SELECT 1 FROM {{table}} e
          WHERE e.status IN ('PENDING', 'DELIVERING', 'DEAD') AND e.partition_key = d.partition_key
            AND e.seq < d.seq)
) AS heads
WHERE waiting > 0
ORDER BY state_at
LIMIT ?
