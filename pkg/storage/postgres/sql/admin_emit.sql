-- Insert test events ($1 their ids) in one statement, so they commit together
-- and the insert trigger notifies the relays once. ORDINALITY keeps the ids'
-- order, which seq records, so events sharing a key are relayed in it.
INSERT INTO {{table}} (event_id, event_type, partition_key, payload, headers, available_at)
SELECT e.id, $2::text, $3::text, $4::bytea, $5::jsonb, now() + $6::bigint * interval '1 microsecond'
FROM unnest($1::uuid[]) WITH ORDINALITY AS e(id, n)
ORDER BY e.n
