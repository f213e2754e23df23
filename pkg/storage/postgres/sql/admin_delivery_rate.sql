-- Deliveries per minute over the last hour, for the console's chart: the
-- rows delivered late, a range of late_idx, and those delivered in time, a
-- range of created_idx (see admin_stats_counts.sql). One row: now() (the
-- end of the last minute), then the minutes counted back from it (0: the
-- last 60 seconds) that saw deliveries and their counts, as two arrays of
-- the same length.
WITH recent AS (
    SELECT delivered_at FROM {{table}}
    WHERE status = 'DELIVERED' AND {{delivered_late}}
      AND delivered_at > now() - interval '60 minutes' AND delivered_at <= now()
    UNION ALL
    SELECT delivered_at FROM {{table}}
    WHERE created_at > now() - interval '60 minutes' - {{late_after}}
      AND status = 'DELIVERED' AND NOT {{delivered_late}}
      AND delivered_at > now() - interval '60 minutes' AND delivered_at <= now()
), d AS (
    SELECT floor(extract(epoch FROM now() - delivered_at) / 60)::int AS ago, count(*) AS n
    FROM recent
    GROUP BY ago
)
SELECT now(), coalesce(array_agg(ago), '{}'), coalesce(array_agg(n), '{}')
FROM d
