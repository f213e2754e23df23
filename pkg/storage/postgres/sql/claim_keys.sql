-- What an ordered claim that walks the keys from their floors
-- (sql/ordered/walk_floors.sql, keys.go) reads first: the keys of the
-- keyed PENDING rows it may not know of, found by the relay's key
-- frontier in writer order, as the unordered claims find their fresh rows
-- (docs/architecture.md, "The claim frontier" and "Ordered claims"). It
-- locks nothing and reads rows whether due or not: a key with any
-- unfinished event waits, and the walk finds what of it is due.
--   fresh    keyed PENDING rows after the key frontier ($1, $2) in writer
--            order, those of watched writers aside, at most $5;
--   watched  the keyed PENDING rows of each writer in $3 after the seq
--            $4 holds for it, at most $5 a writer: writers that were
--            running when the key frontier passed their ids.
-- The rows: 'key' (a key and its lowest seq read), 'fresh' (how many
-- fresh rows were read, and the last in writer order), 'watched' (per
-- watched writer read: how many, and the highest seq) and 'snapshot'.
WITH fresh AS (
    SELECT partition_key, COALESCE(writer_xid, '0'::xid8) AS writer, seq
    FROM {{table}}
    WHERE status = 'PENDING' AND (COALESCE(writer_xid, '0'::xid8), seq) > ($1::text::xid8, $2::bigint)
      AND COALESCE(writer_xid, '0'::xid8) <> ALL($3::text[]::xid8[])
      AND partition_key <> ''
    ORDER BY COALESCE(writer_xid, '0'::xid8), seq
    LIMIT $5::bigint
), watched AS (
    SELECT w.writer, r.partition_key, r.seq
    FROM unnest($3::text[]::xid8[], $4::bigint[]) AS w(writer, after)
    CROSS JOIN LATERAL (
        SELECT partition_key, seq
        FROM {{table}}
        WHERE status = 'PENDING' AND COALESCE(writer_xid, '0'::xid8) = w.writer AND seq > w.after
          AND partition_key <> ''
        ORDER BY seq
        LIMIT $5::bigint
    ) r
)
SELECT 'key' AS fact, partition_key AS k, NULL::bigint AS writer, min(seq) AS seq, NULL::bigint AS n
FROM (SELECT partition_key, seq FROM fresh UNION ALL SELECT partition_key, seq FROM watched) AS found
GROUP BY partition_key
UNION ALL
SELECT 'fresh', NULL, (SELECT writer::text::bigint FROM fresh ORDER BY writer DESC, seq DESC LIMIT 1),
       (SELECT seq FROM fresh ORDER BY writer DESC, seq DESC LIMIT 1), (SELECT count(*) FROM fresh)
UNION ALL
SELECT 'watched', NULL, writer::text::bigint, max(seq), count(*)
FROM watched
GROUP BY writer
UNION ALL
SELECT 'snapshot', pg_current_snapshot()::text, NULL, NULL, NULL
