-- Move the rows of a lease still being published to a new stamp ($4), so
-- that a slow broker does not let the reaper hand them to another relay.
-- The relay picks the stamp: if the answer is lost it still knows what the
-- rows may hold, and repeating the statement is harmless. $2 lists the
-- stamps the rows may hold now.
UPDATE {{table}}
SET locked_at = $4
WHERE event_id = ANY($3::uuid[])
  AND status = 'DELIVERING' AND locked_by = $1 AND locked_at = ANY($2::timestamptz[])
  AND created_at BETWEEN $5 AND $6 -- see mark_delivered.sql
