-- The backlog, cheap enough for a metrics scrape every few seconds: it
-- reads the PENDING and DEAD ranges of state_seq_idx (which holds every
-- column it needs; a PENDING row's state_at is the later of available_at
-- and updated_at, so it has passed once the row is due), never the
-- delivered history that makes up most of the table. The oldest age counts
-- only events that are due: one scheduled for next week is not late. The
-- argument is the instant to judge by, NULL for the statement's own clock;
-- it comes back too. {{from}} is where the PENDING range is read from: in a
-- relay's process, the lowest of its relays' claim floors (cursor.go):
-- behind them lie the entries every claim leaves, which purge cannot remove
-- while any snapshot is older, and, for a sweep to find, rows whose
-- transaction committed late; in relay-cli the range's start.
SELECT COALESCE(SUM(p.attempts = 0), 0), COALESCE(SUM(p.attempts > 0), 0),
       MIN(IF(p.state_at <= n.at, p.created_at, NULL)),
       n.at,
       (SELECT COUNT(*) FROM {{table}} FORCE INDEX (`{{name}}_state_seq_idx`) WHERE status = 'DEAD')
FROM (SELECT CAST(COALESCE(?, UTC_TIMESTAMP(6)) AS DATETIME(6)) AS at) AS n
LEFT JOIN {{table}} AS p FORCE INDEX (`{{name}}_state_seq_idx`) ON p.status = 'PENDING'{{from}}
GROUP BY n.at
