-- Insert any number of events in one statement, in the order given, so that
-- seq keeps their order. created_at is clock_timestamp(), the time of the
-- insert, rather than now(), the start of the transaction: a writer that
-- locks its aggregate first then stamps its events after the previous
-- writer's commit, so per-key order by created_at is commit order (see
-- docs/architecture.md). It is read once for the statement, so a clock
-- stepping back mid-statement cannot reorder the events.
WITH stamp AS (SELECT clock_timestamp() AS at)
INSERT INTO {{table}} (event_id, event_type, partition_key, payload, headers, available_at, created_at)
SELECT e.id, e.type, nullif(e.key, ''), e.payload, e.headers, coalesce(e.available_at, now()), stamp.at
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bytea[], $5::jsonb[], $6::timestamptz[])
     WITH ORDINALITY AS e(id, type, key, payload, headers, available_at, n), stamp
ORDER BY e.n
