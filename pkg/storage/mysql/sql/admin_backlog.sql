-- The backlog, cheap enough for a metrics scrape every few seconds: it
-- reads the PENDING range of pending_idx (which holds every column it
-- needs) and the DEAD range of dead_idx, never the delivered history that
-- makes up most of the table. The oldest age counts only events that are
-- due: one scheduled for next week is not late. ? is the instant to judge
-- by, NULL for the statement's own clock; it comes back too.
SELECT COALESCE(SUM(p.attempts = 0), 0), COALESCE(SUM(p.attempts > 0), 0),
       MIN(IF(p.available_at <= n.at, p.created_at, NULL)),
       n.at,
       (SELECT COUNT(*) FROM {{table}} FORCE INDEX (`{{name}}_dead_idx`) WHERE status = 'DEAD')
FROM (SELECT CAST(COALESCE(?, UTC_TIMESTAMP(6)) AS DATETIME(6)) AS at) AS n
LEFT JOIN {{table}} AS p FORCE INDEX (`{{name}}_pending_idx`) ON p.status = 'PENDING'
GROUP BY n.at
