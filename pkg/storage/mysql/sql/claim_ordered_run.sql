-- One key's candidates for an ordered claim: its first 20 PENDING events in
-- order, each with whether it is due by the claim's stamp (?), whether the
-- key has an event DELIVERING (?: the key) — then another relay holds it,
-- or a failed run is being handed back, and the key waits — and, under
-- ORDERING_ON_DEAD=block, whether a DEAD event of the key comes before it
-- ({{held}}). The driver joins one of these per key with UNION ALL; the last
-- ? is the key. Every part reads a few entries of key_order_idx.
(SELECT r.partition_key, r.event_id, r.created_at, r.seq,
        r.available_at <= ? AS due,
        EXISTS (SELECT 1 FROM {{table}} b WHERE b.status = 'DELIVERING' AND b.partition_key = ?) AS busy,
        {{held}} AS held
 FROM {{table}} r FORCE INDEX (`{{name}}_key_order_idx`)
 WHERE r.status = 'PENDING' AND r.partition_key = ?
 ORDER BY r.created_at, r.seq
 LIMIT 20)
