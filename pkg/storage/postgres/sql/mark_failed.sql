-- Settle failed events of one lease by the failure rule (dueAgainRules in
-- queries.go): count the attempt, keep the error, and either schedule the
-- retry or bury the event.
UPDATE {{table}} AS t
SET {{failed_attempt}},
    locked_by = NULL, locked_at = NULL, updated_at = statement_timestamp()
FROM unnest($3::uuid[], $4::text[], $5::bool[], $6::bigint[]) AS f(event_id, error, dead, delay_us)
WHERE t.event_id = f.event_id
  AND t.status = 'DELIVERING' AND t.locked_by = $1 AND t.locked_at = ANY($2::timestamptz[])
  AND t.created_at BETWEEN $7 AND $8 -- see mark_delivered.sql
