-- Keys whose first unfinished event is DEAD while later events wait. Under
-- ORDERING=partition with ORDERING_ON_DEAD=block the relay holds these keys
-- until an operator retries or prunes the DEAD event. The outer scan reads
-- the DEAD index; the subqueries the key-order indexes.
SELECT partition_key, event_id, event_type, waiting
FROM (
    SELECT d.partition_key, d.event_id, d.event_type, d.updated_at,
           (SELECT count(*) FROM {{table}} w
            WHERE w.partition_key COLLATE "C" = d.partition_key COLLATE "C"
              AND w.status IN ('PENDING', 'DELIVERING') AND w.status = 'PENDING') AS waiting
    FROM {{table}} d
    WHERE d.status = 'DEAD' AND d.partition_key > ''
      AND NOT EXISTS (
          SELECT 1 FROM {{table}} e
          WHERE e.partition_key COLLATE "C" = d.partition_key COLLATE "C"
            AND e.status IN ('PENDING', 'DELIVERING')
            AND e.seq < d.seq)
      AND NOT EXISTS (
          SELECT 1 FROM {{table}} e
          WHERE e.partition_key COLLATE "C" = d.partition_key COLLATE "C" AND e.status = 'DEAD'
            AND e.seq < d.seq)
) heads
WHERE waiting > 0
ORDER BY updated_at
LIMIT $1
