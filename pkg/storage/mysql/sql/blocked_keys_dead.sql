-- ORDERING_ON_DEAD=block: the part of blocked_keys.sql that finds the
-- key's first DEAD event (? is the key).
UNION ALL
(SELECT b.partition_key, b.seq FROM {{table}} b FORCE INDEX (`{{name}}_key_order_seq_idx`)
 WHERE b.status = 'DEAD' AND b.partition_key = ?
 ORDER BY b.seq
 LIMIT 1)
