-- Insert any number of events in one statement, in the order given, so that
-- seq keeps their order (seq, not created_at, is the order events are
-- published in). created_at is clock_timestamp(), the time of the insert,
-- rather than now(), the start of the transaction, so that it says when the
-- event was written. It is read once for the statement, so one statement's
-- events share it.
WITH stamp AS (SELECT clock_timestamp() AS at)
INSERT INTO {{table}} (event_id, event_type, partition_key, payload, headers, available_at, created_at)
SELECT e.id, e.type, nullif(e.key, ''), e.payload, e.headers, coalesce(e.available_at, now()), stamp.at
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bytea[], $5::jsonb[], $6::timestamptz[])
     WITH ORDINALITY AS e(id, type, key, payload, headers, available_at, n), stamp
ORDER BY e.n
