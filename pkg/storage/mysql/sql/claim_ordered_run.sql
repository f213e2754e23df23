-- One key's candidates for an ordered claim: its first PENDING events in
-- write order (seq), at most the last argument (storage.ClaimParams.RunLimit),
-- each with whether it is due by the claim's stamp (the first argument),
-- whether an event of the key that is DELIVERING was written before it (the
-- second: the key) — another relay holds that part of the key, or a failed
-- run is being handed back — and, under ORDERING_ON_DEAD=block, whether a
-- DEAD event of the key was written before it ({{held}}). A key's run stops
-- at the first event that is not due or has one of those before it. The
-- driver joins one of these per key with UNION ALL; the argument before the
-- last is the key. {{fresh}} is empty, or beside a log reader
-- claim_ordered_fresh.sql, whose ? follows the stamp. Every part reads a
-- few entries of key_order_seq_idx.
(SELECT r.partition_key, r.event_id, r.seq,
        (r.available_at <= ? {{fresh}}) AS due,
        COALESCE(r.seq > (
            SELECT b.seq FROM {{table}} b FORCE INDEX (`{{name}}_key_order_seq_idx`)
            WHERE b.status = 'DELIVERING' AND b.partition_key = ?
            ORDER BY b.seq
            LIMIT 1), 0) AS busy,
        {{held}} AS held
 FROM {{table}} r FORCE INDEX (`{{name}}_key_order_seq_idx`)
 WHERE r.status = 'PENDING' AND r.partition_key = ?
 ORDER BY r.seq
 LIMIT ?)
