-- The next keys with PENDING events after ? in bytewise order, at most ?
-- of them ({{upper}} adds "AND partition_key <= ?" for the part of the walk
-- that wrapped around). Grouping on the leading columns of
-- key_order_seq_idx lets the server jump from key to key instead of
-- reading every event. Keys that are NULL or empty are no key: they sort
-- first and "> ''" leaves them out.
SELECT partition_key
FROM {{table}} FORCE INDEX (`{{name}}_key_order_seq_idx`)
WHERE status = 'PENDING' AND partition_key > ? {{upper}}
GROUP BY status, partition_key
ORDER BY status, partition_key
LIMIT ?
