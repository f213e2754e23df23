-- Delete one batch of DEAD rows that died (updated_at) more than $1
-- microseconds ago, at most $2 rows; see admin_prune_delivered.sql for why it
-- is shaped this way. The status check in the DELETE matters here: a row
-- that retry-dead sends back to PENDING meanwhile must stay.
WITH picked AS MATERIALIZED (
    SELECT event_id
    FROM {{table}}
    WHERE status = 'DEAD' AND updated_at < now() - $1::bigint * interval '1 microsecond'
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {{table}} AS t
USING picked
WHERE t.event_id = picked.event_id AND t.status = 'DEAD'
