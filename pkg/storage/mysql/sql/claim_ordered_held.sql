-- ORDERING_ON_DEAD=block: whether the key's first DEAD event (? is the
-- key) comes before the candidate r. No DEAD event: not held.
COALESCE((r.created_at, r.seq) > (
    SELECT d.created_at, d.seq FROM {{table}} d
    WHERE d.status = 'DEAD' AND d.partition_key = ?
    ORDER BY d.created_at, d.seq
    LIMIT 1), 0)
