-- The rows that keep a partition ({{partition}}), by status: every PENDING
-- and DELIVERING row, DELIVERED rows delivered within $1 microseconds (or
-- never: delivered_at NULL, as prune keeps them), DEAD rows that died
-- (updated_at) within $2 microseconds; a NULL retention keeps every row of
-- its status. Each count reads one partial index and stops at $3, so that
-- a partition kept for days is not read in full at every run; DELIVERED
-- rows are two ranges, those delivered late (or never) of late_idx and
-- those delivered in time of created_idx (see admin_stats_counts.sql).
-- Without locks; partition_blocked.sql checks again under the lock.
SELECT (SELECT count(*) FROM (SELECT 1 FROM {{partition}} WHERE status = 'PENDING' LIMIT $3) k),
       (SELECT count(*) FROM (SELECT 1 FROM {{partition}} WHERE status = 'DELIVERING' LIMIT $3) k),
       (SELECT count(*) FROM (
            SELECT 1 FROM {{partition}} WHERE status = 'DELIVERED' AND {{delivered_late}}
                AND ($1::bigint IS NULL OR delivered_at IS NULL
                     OR delivered_at >= now() - $1::bigint * interval '1 microsecond')
            UNION ALL
            SELECT 1 FROM {{partition}} WHERE status = 'DELIVERED' AND NOT {{delivered_late}}
                AND ($1::bigint IS NULL
                     OR (created_at >= now() - $1::bigint * interval '1 microsecond' - {{late_after}}
                         AND delivered_at >= now() - $1::bigint * interval '1 microsecond'))
            LIMIT $3) k),
       (SELECT count(*) FROM (SELECT 1 FROM {{partition}} WHERE status = 'DEAD'
            AND ($2::bigint IS NULL OR updated_at >= now() - $2::bigint * interval '1 microsecond') LIMIT $3) k)
