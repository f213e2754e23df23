-- Send DEAD rows back to PENDING for a fresh start: attempts 0, due now.
-- last_error stays until the next attempt overwrites it, so the reason is
-- not lost if the retry succeeds, marked as from before the retry with the
-- attempts it had: "before retry-dead (attempts: 25): <error>". NULL
-- parameters match everything: $1 ids, $2 event type, $3 died
-- (updated_at) at or after, $4 text last_error contains (any case), $5
-- limit, oldest deaths first, $6 partition key, $7 and $8 created at or
-- after and before. Keep the conditions in step with
-- admin_retry_dead_count.sql.
WITH picked AS MATERIALIZED (
    SELECT event_id
    FROM {{table}}
    WHERE status = 'DEAD'
      AND ($1::uuid[] IS NULL OR event_id = ANY($1::uuid[]))
      AND ($2::text IS NULL OR event_type = $2::text)
      AND ($3::timestamptz IS NULL OR updated_at >= $3::timestamptz)
      AND ($4::text IS NULL OR strpos(lower(coalesce(last_error, '')), lower($4::text)) > 0)
      AND ($6::text IS NULL OR partition_key = $6::text)
      AND ($7::timestamptz IS NULL OR created_at >= $7::timestamptz)
      AND ($8::timestamptz IS NULL OR created_at < $8::timestamptz)
    ORDER BY updated_at
    LIMIT $5::bigint
    FOR UPDATE SKIP LOCKED
)
UPDATE {{table}} AS t
SET status = 'PENDING', attempts = 0, available_at = {{due_now}}, {{handed_back}},
    last_error = CASE WHEN t.last_error IS NULL OR t.last_error = '' OR t.last_error LIKE 'before retry-dead (%' THEN t.last_error
                      ELSE 'before retry-dead (attempts: ' || t.attempts || '): ' || t.last_error END,
    -- A row from before seq existed gets its place in the write order
    -- now: claims and ordered claims compare seq, never NULL.
    seq = coalesce(t.seq, nextval('{{schema}}"{{name}}_seq"')),
    locked_by = NULL, locked_at = NULL, updated_at = now()
FROM picked
WHERE t.event_id = picked.event_id AND t.status = 'DEAD'
