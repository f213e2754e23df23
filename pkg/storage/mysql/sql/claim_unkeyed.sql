-- Events without a key for an ordered claim, which takes them by when they
-- became due, then in write order, not in any key's order: at most ? that
-- are due by the claim's stamp (?); {{fresh}} is empty or claim_fresh.sql
-- (its ? follows the stamp).
SELECT event_id
FROM {{table}}
WHERE status = 'PENDING' AND (partition_key IS NULL OR partition_key = '') AND state_at <= ? {{fresh}}
ORDER BY state_at, seq
LIMIT ?
