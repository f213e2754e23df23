-- Rows in flight and delivered, for `relay-cli stats`. The DELIVERING count
-- filters on a partial index's predicate; the exact count of DELIVERED rows
-- reads them all (the console asks for an estimate). Recent deliveries are two ranges: those
-- delivered late of late_idx, those delivered in time of created_idx (a
-- row delivered within {{late_after}} of its creation was created at most
-- that much before the hour began). now() is the transaction's start, the
-- snapshot's time. $1 false skips the count of DELIVERED rows (0), which
-- Stats then estimates (admin_table_rows.sql).
SELECT (SELECT count(*) FROM {{table}} WHERE status = 'DELIVERING'),
       (SELECT count(*) FROM {{table}} WHERE status = 'DELIVERED' AND $1::boolean),
       d.last_minute, d.last_hour, now()
FROM (
    SELECT count(*) FILTER (WHERE delivered_at > now() - interval '1 minute') AS last_minute,
           count(*) AS last_hour
    FROM (
        SELECT delivered_at FROM {{table}}
        WHERE status = 'DELIVERED' AND {{delivered_late}}
          AND delivered_at > now() - interval '1 hour'
        UNION ALL
        SELECT delivered_at FROM {{table}}
        WHERE created_at > now() - interval '1 hour' - {{late_after}}
          AND status = 'DELIVERED' AND NOT {{delivered_late}}
          AND delivered_at > now() - interval '1 hour'
    ) AS recent
) AS d
