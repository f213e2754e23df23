-- Record failed attempts of events read from the write-ahead log by the
-- failure rule, as mark_failed.sql does for a lease; rows found and guarded
-- as in record_delivered.sql.
UPDATE {{table}} AS t
SET {{failed_attempt}},
    updated_at = statement_timestamp()
FROM unnest($1::uuid[], $2::timestamptz[], $3::text[], $4::bool[], $5::bigint[])
     AS f(event_id, created_at, error, dead, delay_us)
WHERE t.event_id = f.event_id AND {% if .ExactCreated %}t.created_at = f.created_at{% else %}true{% end %}
  AND t.status = 'PENDING' AND t.available_at <= t.created_at
