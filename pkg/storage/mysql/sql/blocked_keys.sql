-- One key's events that block the binlog's delivery of its later ones:
-- the first DELIVERING (a claim holds it), and the first PENDING that is
-- due again (retried, handed to the claims) or that the claims backfill
-- (seq up to ?, storage.BlockedKeysParams.Backfill); {{dead}} is empty or
-- blocked_keys_dead.sql. Fresh PENDING rows past the backfill block
-- nothing: the log delivers them. ? are the key, the key and the backfill
-- (then the key for {{dead}}). The driver joins one of these per key with
-- UNION ALL and keeps each key's lowest seq. Every part reads a few
-- entries of key_order_seq_idx.
(SELECT b.partition_key, b.seq FROM {{table}} b FORCE INDEX (`{{name}}_key_order_seq_idx`)
 WHERE b.status = 'DELIVERING' AND b.partition_key = ?
 ORDER BY b.seq
 LIMIT 1)
UNION ALL
(SELECT b.partition_key, b.seq FROM {{table}} b FORCE INDEX (`{{name}}_key_order_seq_idx`)
 WHERE b.status = 'PENDING' AND b.partition_key = ? AND (b.available_at > b.created_at OR b.seq <= ?)
 ORDER BY b.seq
 LIMIT 1)
{{dead}}
