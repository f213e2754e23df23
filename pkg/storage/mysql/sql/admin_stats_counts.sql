-- Rows in flight and delivered, for `relay-cli stats`. Each count reads one
-- status's range of an index; recent deliveries are a range of
-- delivered_idx. Both ? are the snapshot's instant.
SELECT (SELECT COUNT(*) FROM {{table}} FORCE INDEX (`{{name}}_delivering_idx`) WHERE status = 'DELIVERING'),
       (SELECT COUNT(*) FROM {{table}} FORCE INDEX (`{{name}}_delivered_idx`) WHERE status = 'DELIVERED'),
       (SELECT COUNT(*) FROM {{table}} FORCE INDEX (`{{name}}_delivered_idx`)
        WHERE status = 'DELIVERED' AND delivered_at > CAST(? AS DATETIME(6)) - INTERVAL 1 MINUTE),
       (SELECT COUNT(*) FROM {{table}} FORCE INDEX (`{{name}}_delivered_idx`)
        WHERE status = 'DELIVERED' AND delivered_at > CAST(? AS DATETIME(6)) - INTERVAL 1 HOUR)
