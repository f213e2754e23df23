-- Record failed attempts of events read from the write-ahead log, as
-- mark_failed.sql does for a lease; rows found and guarded as in
-- record_delivered.sql. A retried row's available_at lies after its
-- created_at: the claims find it in the due index.
UPDATE {{table}} AS t
SET status = CASE WHEN f.dead THEN 'DEAD' ELSE 'PENDING' END,
    attempts = t.attempts + 1,
    last_error = f.error,
    available_at = CASE WHEN f.dead THEN t.available_at
                        ELSE greatest(now() + f.delay_us * interval '1 microsecond',
                                      t.created_at + interval '1 microsecond') END,
    updated_at = now()
FROM unnest($1::uuid[], $2::timestamptz[], $3::text[], $4::bool[], $5::bigint[])
     AS f(event_id, created_at, error, dead, delay_us)
WHERE t.event_id = f.event_id AND {{created_match}}
  AND t.status = 'PENDING' AND t.available_at <= t.created_at
