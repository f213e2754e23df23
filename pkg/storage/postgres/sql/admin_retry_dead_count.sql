-- What admin_retry_dead would move, for `relay-cli retry-dead --dry-run` and
-- its confirmation prompt. The same conditions as admin_retry_dead.sql.
SELECT count(*)
FROM (
    SELECT 1
    FROM {{table}}
    WHERE status = 'DEAD'
      AND ($1::uuid[] IS NULL OR event_id = ANY($1::uuid[]))
      AND ($2::text IS NULL OR event_type = $2::text)
      AND ($3::timestamptz IS NULL OR updated_at >= $3::timestamptz)
      AND ($4::text IS NULL OR strpos(lower(coalesce(last_error, '')), lower($4::text)) > 0)
      AND ($6::text IS NULL OR partition_key = $6::text)
      AND ($7::timestamptz IS NULL OR created_at >= $7::timestamptz)
      AND ($8::timestamptz IS NULL OR created_at < $8::timestamptz)
    LIMIT $5::bigint
) AS matching
