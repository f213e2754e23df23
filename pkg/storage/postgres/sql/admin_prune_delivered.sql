-- Delete one batch of DELIVERED rows delivered more than $1 microseconds ago,
-- at most $2 rows, so that each batch is a short transaction holding few
-- locks. The rows delivered late (or otherwise not in time) are a range of
-- late_idx; those delivered in time, which were created no later than
-- they were delivered, a range of created_idx up to the same time. The
-- selections are materialized CTEs on purpose: as an IN (subquery) the
-- planner may run one more than once, and with SKIP LOCKED each run picks
-- other rows, so one statement would delete several batches. SKIP LOCKED
-- leaves rows another statement holds to a later batch or run; the status
-- check in the DELETE makes sure a row that changed meanwhile is never
-- deleted.
WITH late AS MATERIALIZED (
    SELECT event_id
    FROM {{table}}
    WHERE status = 'DELIVERED' AND {{delivered_late}}
      AND delivered_at < now() - $1::bigint * interval '1 microsecond'
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), in_time AS MATERIALIZED (
    SELECT event_id
    FROM {{table}}
    WHERE created_at < now() - $1::bigint * interval '1 microsecond'
      AND status = 'DELIVERED' AND NOT {{delivered_late}}
      AND delivered_at < now() - $1::bigint * interval '1 microsecond'
    LIMIT greatest($2 - (SELECT count(*) FROM late), 0)
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {{table}} AS t
USING (SELECT event_id FROM late UNION ALL SELECT event_id FROM in_time) AS picked
WHERE t.event_id = picked.event_id AND t.status = 'DELIVERED'
