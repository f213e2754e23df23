-- Delete one batch of DELIVERED rows delivered more than $1 microseconds ago,
-- at most $2 rows, so that each batch is a short transaction holding few
-- locks. The selection walks the delivered_at partial index. It is a
-- materialized CTE on purpose: as an IN (subquery) the planner may run it
-- more than once, and with SKIP LOCKED each run picks other rows, so one
-- statement would delete several batches. SKIP LOCKED leaves rows another
-- statement holds to a later batch or run; the status check in the DELETE
-- makes sure a row that changed meanwhile is never deleted.
WITH picked AS MATERIALIZED (
    SELECT event_id
    FROM {{table}}
    WHERE status = 'DELIVERED' AND delivered_at < now() - $1::bigint * interval '1 microsecond'
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {{table}} AS t
USING picked
WHERE t.event_id = picked.event_id AND t.status = 'DELIVERED'
