-- Record failed attempts of events read from the write-ahead log, as
-- mark_failed.sql does for a lease, under record_delivered.sql's guard. A
-- retried row's available_at lies after its created_at: the claims find it
-- in the due index.
UPDATE {{table}} AS t
SET status = CASE WHEN f.dead THEN 'DEAD' ELSE 'PENDING' END,
    attempts = t.attempts + 1,
    last_error = f.error,
    available_at = CASE WHEN f.dead THEN t.available_at
                        ELSE greatest(now() + f.delay_us * interval '1 microsecond',
                                      t.created_at + interval '1 microsecond') END,
    updated_at = now()
FROM unnest($1::uuid[], $2::text[], $3::bool[], $4::bigint[]) AS f(event_id, error, dead, delay_us)
WHERE t.event_id = f.event_id
  AND t.status = 'PENDING' AND t.available_at <= t.created_at
  AND t.created_at BETWEEN $5 AND $6 -- see mark_delivered.sql
