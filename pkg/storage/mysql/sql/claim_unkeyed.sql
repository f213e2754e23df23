-- Events without a key for an ordered claim, which takes them by age, not
-- in any key's order: at most ? that are due by the claim's stamp (?), in
-- the order of state_seq_idx.
SELECT event_id
FROM {{table}} FORCE INDEX (`{{name}}_state_seq_idx`)
WHERE status = 'PENDING' AND (partition_key IS NULL OR partition_key = '') AND state_at <= ?
ORDER BY state_at, seq
LIMIT ?
