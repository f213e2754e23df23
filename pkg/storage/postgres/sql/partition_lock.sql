-- Partition maintenance, one relay at a time: try a transaction-scoped
-- advisory lock keyed by the table's OID ($2, resolved from its name); $1
-- sets it apart from other advisory locks. False: another relay is at it.
SELECT pg_try_advisory_xact_lock(($1::bigint << 32) | $2::regclass::oid::bigint)
