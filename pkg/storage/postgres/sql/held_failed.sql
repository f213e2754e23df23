-- Settle failed events of a held claim by the failure rule, as
-- mark_failed.sql does for a lease; rows found as in held_delivered.sql,
-- joined to their failures, each address paired with its id.
UPDATE {{table}} AS t
SET {{failed_attempt}},
    updated_at = statement_timestamp()
FROM unnest($1::tid[], $2::uuid[], $3::text[], $4::bool[], $5::bigint[])
     AS f(row_id, event_id, error, dead, delay_us)
WHERE {{row_match}} AND t.status = 'PENDING'
  AND t.created_at BETWEEN $6 AND $7 -- see mark_delivered.sql
