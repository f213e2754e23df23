-- Settle delivered events that the relay read from the write-ahead log
-- (CAPTURE=wal). No lease guards them: a row is the log reader's while it
-- is PENDING and fresh (available_at not after created_at); a row a claim
-- took meanwhile, or one handed to the claims, is left alone.
--
-- The rows are found by a join with the ids, one primary-key probe each,
-- whatever the statistics and in a generic plan alike: a plan that reads
-- the ids as an array may walk the PENDING index and the created_at index
-- instead (seen on a table never analysed, at the cost of the whole
-- backlog per statement). With .ExactCreated the rows' exact created_at
-- finds each in its partition alone; without, for rows whose created_at
-- the log could not read ($2 then NULLs), any created_at will do.
UPDATE {{table}} AS t
SET status = 'DELIVERED', delivered_at = now(), updated_at = now()
FROM unnest($1::uuid[], $2::timestamptz[]) AS f(event_id, created_at)
WHERE t.event_id = f.event_id AND {% if .ExactCreated %}t.created_at = f.created_at{% else %}true{% end %}
  AND t.status = 'PENDING' AND t.available_at <= t.created_at
