-- ORDERING_ON_DEAD=block: whether the key's first DEAD event (? is the
-- key) was written before the candidate r. No DEAD event: not held.
COALESCE(r.seq > (
    SELECT d.seq FROM {{table}} d FORCE INDEX (`{{name}}_key_order_seq_idx`)
    WHERE d.status = 'DEAD' AND d.partition_key = ?
    ORDER BY d.seq
    LIMIT 1), 0)
