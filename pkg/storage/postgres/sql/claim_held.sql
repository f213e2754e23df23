-- Claim a batch under row locks (LEASE_MODE=lock): the claim's transaction
-- stays open while the batch is at the broker, and records its outcome and
-- commits (held_*.sql). The rows stay PENDING; the locks keep other claims
-- away (they skip locked rows) and end with the transaction, also when the
-- relay dies. Rows are looked for where claim.sql looks, with the same
-- parameters ($5 is always the highest seq there is: a held claim takes
-- fresh rows), and come back in write order (seq).
--
-- Unlike claim.sql it locks no more rows than it may take, since it keeps
-- its locks: fresh rows fill what the rows due again left of the batch.
-- The two sets do not overlap (a fresh row's available_at is not after its
-- created_at), so every row is read once, with all it carries, and nothing
-- is read again by its key. It returns every row it locked; those past the
-- byte limit come without payload and headers and stay as they are,
-- PENDING: the relay's next claims skip them while this transaction holds
-- them, and its claim positions stay before them until it ends
-- (position.go's cut). Each row comes back with its physical
-- address (ctid), where the settling statements find it: no other
-- statement can move a row while this transaction holds it.
WITH again AS (
    SELECT ctid AS row_id, event_id, event_type, partition_key, payload, headers, attempts,
           created_at, available_at, seq, octet_length(payload) + pg_column_size(headers) AS size
    FROM {{table}}
    WHERE status = 'PENDING' AND available_at > created_at AND available_at <= now()
      AND (available_at, seq) >= ($6::timestamptz, $7::bigint)
    ORDER BY available_at, seq
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), fresh AS (
    SELECT ctid AS row_id, event_id, event_type, partition_key, payload, headers, attempts,
           created_at, available_at, seq, octet_length(payload) + pg_column_size(headers) AS size
    FROM {{table}}
    WHERE status = 'PENDING' AND seq > $4::bigint AND seq <= $5::bigint
      AND available_at <= now() AND available_at <= created_at
    ORDER BY seq
    LIMIT greatest($2 - (SELECT count(*) FROM again), 0)
    FOR UPDATE SKIP LOCKED
)
-- As in claim.sql, then how many rows it locked from the due index,
-- whether the row is taken (within the byte limit $3: a running total in
-- write order; the first row always), and the row's address last. $1, the
-- relay id, names no lease here.
SELECT event_id, event_type, coalesce(partition_key, ''),
       CASE WHEN taken THEN payload END, CASE WHEN taken THEN headers END, attempts,
       CASE WHEN isfinite(created_at) THEN created_at END, seq, available_at > created_at,
       CASE WHEN available_at > created_at THEN available_at END, (SELECT count(*) FROM again),
       taken, row_id
FROM (
    SELECT *, ($3::bigint <= 0 OR sum(size) OVER w <= $3::bigint OR row_number() OVER w = 1) AS taken
    FROM (SELECT * FROM again UNION ALL SELECT * FROM fresh) AS both_sets
    WINDOW w AS (ORDER BY seq, event_id ROWS UNBOUNDED PRECEDING)
) AS locked
WHERE $1::text IS NOT NULL
ORDER BY seq, event_id
