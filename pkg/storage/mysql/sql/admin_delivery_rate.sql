-- Deliveries per minute over the last hour, for the console's chart: a
-- range of state_seq_idx (a DELIVERED row's state_at is its delivered_at). Each
-- row is a minute counted back from the argument, the database's now (0:
-- the last 60 seconds), and its count; minutes without deliveries are
-- missing.
SELECT FLOOR(TIMESTAMPDIFF(MICROSECOND, state_at, CAST(? AS DATETIME(6))) / 60000000) AS ago, COUNT(*)
FROM {{table}} FORCE INDEX (`{{name}}_state_seq_idx`)
WHERE status = 'DELIVERED'
  AND state_at > CAST(? AS DATETIME(6)) - INTERVAL 60 MINUTE
  AND state_at <= CAST(? AS DATETIME(6))
GROUP BY ago
