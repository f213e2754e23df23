-- Delete one batch of records older than $1 microseconds, at most $2 rows,
-- of consumer $3 only when the consumer filter is filled in.
-- A materialized CTE: as an IN (subquery) the planner may run it more than
-- once, and with SKIP LOCKED each run picks other rows. SKIP LOCKED leaves
-- rows another prune is deleting to it.
WITH picked AS MATERIALIZED (
    SELECT consumer, event_id
    FROM {{table}}
    WHERE processed_at < now() - $1::bigint * interval '1 microsecond' {{consumer_filter}}
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {{table}} AS t
USING picked
WHERE t.consumer = picked.consumer AND t.event_id = picked.event_id
