-- Serialise ordered claims on a table. The key is the table's OID ($2,
-- resolved from its name), so relays that spell the name differently
-- (events, public.events) still take turns; $1 sets it apart from other
-- advisory locks.
SELECT pg_advisory_xact_lock(($1::bigint << 32) | $2::regclass::oid::bigint)
