-- Settle failed events of a held claim by the failure rule, as
-- mark_failed.sql does for a lease; rows found as in held_delivered.sql,
-- joined to their failures, each address paired with its id.
UPDATE {{table}} AS t
SET {{failed_attempt}},
    updated_at = statement_timestamp()
FROM unnest($1::tid[], $2::uuid[], $3::text[], $4::bool[], $5::bigint[])
     AS f(row_id, event_id, error, dead, delay_us)
WHERE {% if .ByAddress %}t.ctid = f.row_id AND {% end %}t.event_id = f.event_id AND t.status = 'PENDING'{% if .ByAddress %}
  AND t.created_at BETWEEN $6 AND $7 -- see mark_delivered.sql{% end %}
