-- Whether a partition ({{partition}}) holds any row that keeps it, with the
-- rules of partition_keeps.sql; run under the lock that drops it. Each part
-- reads a partial index or a range of created_idx, so the lock is held for
-- moments, not a scan.
SELECT EXISTS (SELECT 1 FROM {{partition}} WHERE status = 'PENDING')
    OR EXISTS (SELECT 1 FROM {{partition}} WHERE status = 'DELIVERING')
    OR EXISTS (SELECT 1 FROM {{partition}} WHERE status = 'DELIVERED' AND {{delivered_late}}
               AND ($1::bigint IS NULL OR delivered_at IS NULL
                    OR delivered_at >= now() - $1::bigint * interval '1 microsecond'))
    OR EXISTS (SELECT 1 FROM {{partition}} WHERE status = 'DELIVERED' AND NOT {{delivered_late}}
               AND ($1::bigint IS NULL
                    OR (created_at >= now() - $1::bigint * interval '1 microsecond' - {{late_after}}
                        AND delivered_at >= now() - $1::bigint * interval '1 microsecond')))
    OR EXISTS (SELECT 1 FROM {{partition}} WHERE status = 'DEAD'
               AND ($2::bigint IS NULL OR updated_at >= now() - $2::bigint * interval '1 microsecond'))
