-- Settle delivered events of one lease.
UPDATE {{table}}
SET status = 'DELIVERED', delivered_at = now(), updated_at = now(),
    locked_by = NULL, locked_at = NULL
WHERE event_id = ANY($3::uuid[])
  AND status = 'DELIVERING' AND locked_by = $1 AND locked_at = ANY($2::timestamptz[])
  -- The claim's created_at bounds: a partitioned table is searched in the
  -- partitions they cover only (±infinity when unknown).
  AND created_at BETWEEN $4 AND $5
