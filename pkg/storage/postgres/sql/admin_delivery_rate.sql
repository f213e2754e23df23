-- Deliveries per minute over the last hour, for the console's chart: a
-- range of delivered_idx. One row: now() (the end of the last minute),
-- then the minutes counted back from it (0: the last 60 seconds) that saw
-- deliveries and their counts, as two arrays of the same length.
WITH d AS (
    SELECT floor(extract(epoch FROM now() - delivered_at) / 60)::int AS ago, count(*) AS n
    FROM {{table}}
    WHERE status = 'DELIVERED'
      AND delivered_at > now() - interval '60 minutes'
      AND delivered_at <= now()
    GROUP BY ago
)
SELECT now(), coalesce(array_agg(ago), '{}'), coalesce(array_agg(n), '{}')
FROM d
