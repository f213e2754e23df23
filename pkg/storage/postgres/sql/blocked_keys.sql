-- For each key of $1, the lowest seq of an event that blocks it from the
-- write-ahead log's delivery: one due again (retried, handed to the
-- claims), one a claim holds, or under ORDERING_ON_DEAD=block ($2) a DEAD
-- one. Fresh PENDING rows block nothing — the log delivers them — except
-- during a backfill those with seq up to $3, which the claims deliver. One
-- probe of the key-order indexes per key.
SELECT k.key, h.seq
FROM unnest($1::text[]) AS k(key)
CROSS JOIN LATERAL (
    SELECT min(seq) AS seq
    FROM (
        (SELECT seq FROM {{table}}
         WHERE partition_key COLLATE "C" = k.key AND status IN ('PENDING', 'DELIVERING')
           AND (status = 'DELIVERING' OR available_at > created_at OR seq <= $3::bigint)
         ORDER BY partition_key COLLATE "C", seq
         LIMIT 1)
        UNION ALL
        (SELECT seq FROM {{table}}
         WHERE $2::bool AND partition_key COLLATE "C" = k.key AND status = 'DEAD'
         ORDER BY partition_key COLLATE "C", seq
         LIMIT 1)
    ) held
) h
WHERE h.seq IS NOT NULL
