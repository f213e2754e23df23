-- What an ordered claim that walks the keys from their floors
-- (sql/ordered/walk_floors.sql, keys.go) reads first: the keys of the
-- keyed rows not DELIVERED that it may not know of, found by the relay's
-- key frontier in writer order through key_writer_idx, as the unordered
-- claims' ahead arm finds its rows (docs/architecture.md, "The claim
-- frontier" and "Ordered claims"). It locks nothing and reads rows whether
-- due or not, PENDING, DELIVERING (another relay may have claimed a row
-- this relay's floor had passed while its writer ran) or DEAD: a key with
-- any unfinished event waits, its floor goes below it, and the walk finds
-- what of it is due.
--   ahead    such rows after the key frontier ($1, $2) in writer order,
--            those of watched writers aside, at most $5;
--   watched  such rows of each writer in $3 after the seq $4 holds for
--            it, at most $5 a writer: writers that were running when the
--            key frontier passed their ids;
--   swept    when $6, a sweep's: such rows after ($7, $8) in writer
--            order, at most $5, up to the key frontier (a row comparison
--            as an upper bound would not stop the index scan before
--            PostgreSQL 17: the limit does).
-- The rows: 'key' (a key and its lowest seq read), 'ahead' (how many
-- rows ahead were read, and the last in writer order), 'watched' (per
-- watched writer read: how many, and the highest seq), 'swept' (how many
-- rows the sweep read, and the last) and 'snapshot'.
WITH ahead AS (
    SELECT partition_key, {{writer}} AS writer, seq
    FROM {{table}}
    WHERE status <> 'DELIVERED' AND partition_key <> ''
      AND ({{writer}}, seq) > ($1::text::xid8, $2::bigint)
      AND {{writer}} <> ALL($3::text[]::xid8[])
    ORDER BY {{writer}}, seq
    LIMIT $5::bigint
), watched AS (
    SELECT w.writer, r.partition_key, r.seq
    FROM unnest($3::text[]::xid8[], $4::bigint[]) AS w(writer, after)
    CROSS JOIN LATERAL (
        SELECT partition_key, seq
        FROM {{table}}
        WHERE status <> 'DELIVERED' AND partition_key <> ''
          AND {{writer}} = w.writer AND seq > w.after
        ORDER BY seq
        LIMIT $5::bigint
    ) r
), swept AS (
    SELECT partition_key, {{writer}} AS writer, seq
    FROM {{table}}
    WHERE $6::boolean AND status <> 'DELIVERED' AND partition_key <> ''
      AND ({{writer}}, seq) > ($7::text::xid8, $8::bigint)
    ORDER BY {{writer}}, seq
    LIMIT $5::bigint
)
SELECT 'key' AS fact, partition_key AS k, NULL::bigint AS writer, min(seq) AS seq, NULL::bigint AS n
FROM (SELECT partition_key, seq FROM ahead UNION ALL SELECT partition_key, seq FROM watched
      UNION ALL SELECT partition_key, seq FROM swept) AS found
GROUP BY partition_key
UNION ALL
SELECT 'ahead', NULL, (SELECT writer::text::bigint FROM ahead ORDER BY writer DESC, seq DESC LIMIT 1),
       (SELECT seq FROM ahead ORDER BY writer DESC, seq DESC LIMIT 1), (SELECT count(*) FROM ahead)
UNION ALL
SELECT 'watched', NULL, writer::text::bigint, max(seq), count(*)
FROM watched
GROUP BY writer
UNION ALL
SELECT 'swept', NULL, (SELECT writer::text::bigint FROM swept ORDER BY writer DESC, seq DESC LIMIT 1),
       (SELECT seq FROM swept ORDER BY writer DESC, seq DESC LIMIT 1), (SELECT count(*) FROM swept)
WHERE $6::boolean
UNION ALL
SELECT 'snapshot', pg_current_snapshot()::text, NULL, NULL, NULL
