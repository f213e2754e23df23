-- Settle failed events of a held claim as mark_failed.sql does for a lease;
-- rows found as in held_delivered.sql. A retried row's available_at lies
-- after its created_at, so that the claims find it in the due index.
UPDATE {{table}} AS t
SET status = CASE WHEN f.dead THEN 'DEAD' ELSE 'PENDING' END,
    attempts = t.attempts + 1,
    last_error = f.error,
    available_at = CASE WHEN f.dead THEN t.available_at
                        ELSE greatest(statement_timestamp() + f.delay_us * interval '1 microsecond',
                                      t.created_at + interval '1 microsecond') END,
    updated_at = statement_timestamp()
FROM unnest($1::tid[], $2::uuid[], $3::text[], $4::bool[], $5::bigint[])
     AS f(row_id, event_id, error, dead, delay_us)
WHERE {{row_match}} AND t.status = 'PENDING'
  AND t.created_at BETWEEN $6 AND $7 -- see mark_delivered.sql
