-- Rows in flight and delivered, for `relay-cli stats`. Each count reads one
-- status's range of state_seq_idx; recent deliveries are a range of it (a
-- DELIVERED row's state_at is its delivered_at). The first ? is 0 to skip
-- the count of DELIVERED rows (0), which Stats then estimates
-- (admin_table_rows.sql); the others are the snapshot's instant.
SELECT (SELECT COUNT(*) FROM {{table}} FORCE INDEX (`{{name}}_state_seq_idx`) WHERE status = 'DELIVERING'),
       (SELECT COUNT(*) FROM {{table}} FORCE INDEX (`{{name}}_state_seq_idx`) WHERE status = 'DELIVERED' AND ? = 1),
       (SELECT COUNT(*) FROM {{table}} FORCE INDEX (`{{name}}_state_seq_idx`)
        WHERE status = 'DELIVERED' AND state_at > CAST(? AS DATETIME(6)) - INTERVAL 1 MINUTE),
       (SELECT COUNT(*) FROM {{table}} FORCE INDEX (`{{name}}_state_seq_idx`)
        WHERE status = 'DELIVERED' AND state_at > CAST(? AS DATETIME(6)) - INTERVAL 1 HOUR)
