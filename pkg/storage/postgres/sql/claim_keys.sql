-- What an ordered claim that walks the keys from their floors
-- (sql/ordered/walk_floors.sql, keys.go) reads first: the keyed rows it
-- may not know of. The first column tells the kinds of row apart:
--   0: a key among the keyed PENDING rows written after the relay's key
--      position ($1), read in seq order from keyed_pending_idx, at most $2
--      of them, with its first seq there: a new key, a new event of a key
--      seen before, or a row whose transaction committed late, behind its
--      key's floor;
--   2: how far that read got: the highest seq and the number of rows;
--   1: a keyed PENDING row due again (released, failed, reaped, retried
--      from DEAD: its available_at is after its created_at), read from
--      the relay's due position for keys ($3, $4) on, in due_at_idx's
--      order, at most $5 of them (NULL: all, for a sweep): such a row lies
--      behind its key's floor;
--   3 and 4: as 0 and 2 for a sweep's part, the PENDING rows after $6 up
--      to $7, at most $8 (none when $6 is not below $7): rows that became
--      visible behind the key position. A sweep over a long backlog takes
--      several claims, one part each.
-- The key positions move by the same marks and sweeps as the claims'
-- (position.go), so that a row that becomes visible behind them is found.
WITH written AS (
    SELECT partition_key, seq
    FROM {{table}}
    WHERE status = 'PENDING' AND partition_key <> '' AND seq > $1::bigint
    ORDER BY seq
    LIMIT $2::bigint
), swept AS (
    SELECT partition_key, seq
    FROM {{table}}
    WHERE status = 'PENDING' AND partition_key <> '' AND seq > $6::bigint AND seq <= $7::bigint
    ORDER BY seq
    LIMIT $8::bigint
)
SELECT 0, partition_key, min(seq), NULL::timestamptz, NULL::bigint FROM written GROUP BY partition_key
UNION ALL
SELECT 2, NULL, max(seq), NULL, count(*) FROM written
UNION ALL
SELECT 3, partition_key, min(seq), NULL, NULL FROM swept GROUP BY partition_key
UNION ALL
SELECT 4, NULL, max(seq), NULL, count(*) FROM swept
UNION ALL
(SELECT 1, partition_key, seq, available_at, NULL
 FROM {{table}}
 WHERE status = 'PENDING' AND available_at > created_at AND available_at <= now()
   AND partition_key <> ''
   AND (available_at, seq) >= ($3::timestamptz, $4::bigint)
 ORDER BY available_at, seq
 LIMIT $5::bigint)
