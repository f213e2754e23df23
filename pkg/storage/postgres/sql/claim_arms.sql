{% define "arm_columns" -%}
{% if .Held %}ctid AS row_id, tableoid AS row_table, {% end %}event_id, event_type, partition_key, payload, headers, attempts, created_at,
           available_at, seq, {{writer}} AS writer,
           octet_length(payload) + pg_column_size(headers) AS size
{%- end %}
{% define "watched_row" -%}
({{writer}} = ANY($9::text[]::xid8[])
 AND seq >= ($12::bigint[])[array_position($9::text[]::xid8[], {{writer}})])
{%- end %}
{%/* The row conditions of each arm (again_rows, watched_rows, ahead_rows),
     written once for the arm, with (arm .), and for its second read in
     skipped, with (reread .): the reads differ only in when a row counts
     as due (due). The ahead and watched reads also see the rows outside
     the due index that are not due yet; the again arm reads only rows of
     the due index, and its second read the same rows. */%}
{% define "due" -%}
{% if .Reread %}(available_at <= now() OR available_at <= created_at){% else %}available_at <= now(){% end %}
{%- end %}
{% define "again_rows" -%}
status = 'PENDING' {% if .Unkeyed %}AND coalesce(partition_key, '') = ''{% end %} AND available_at > created_at AND available_at <= now()
      AND (available_at, seq) > ($7::timestamptz, $8::bigint)
      AND ({{writer}}, seq) <= ($10::text::xid8, $11::bigint)
      AND NOT {% template "watched_row" %}
{%- end %}
{% define "watched_rows" -%}
status = 'PENDING' {% if .Unkeyed %}AND coalesce(partition_key, '') = ''{% end %} AND {% template "watched_row" %}
      AND {% template "due" . %}
      -- The lowest place, as where the index scan starts in every watched
      -- writer: the per-writer bound above is a filter, and the scan would
      -- still step over the entries of each writer's rows behind it (a
      -- row comparison would not set the start next to the = ANY).
      AND seq >= (SELECT min(f) FROM unnest($12::bigint[]) AS f)
{%- end %}
{% define "ahead_rows" -%}
status = 'PENDING' {% if .Unkeyed %}AND coalesce(partition_key, '') = ''{% end %} AND ({{writer}}, seq) > ($4::text::xid8, $5::bigint)
      AND seq <= {{fresh_to}} AND {% template "due" . %}
      AND NOT {% template "watched_row" %}
{%- end %}
{% define "claim_arms" -%}
-- The rows an unordered claim may take, read in three arms that never
-- overlap (docs/architecture.md, "The claim frontier"). Every claim of rows
-- whose order no key keeps reads them: claim.sql leases what it takes,
-- claim_held.sql holds it, and an ordered claim leases the rows without a
-- key with claim.sql's statement (claim_unkeyed). A row's writer is the transaction that last made
-- it claimable (writer_xid; NULL, a row from before the column, reads as 0).
--   again    rows of the due index (available_at after created_at) that are
--            due, after the due position ($7, $8) in its order, whose writer
--            the frontier has passed (at or before ($10, $11)) and that
--            the watched arm does not read: scheduled rows and rows backing off, which the ahead
--            arm passed before they were due;
--   watched  the due rows of the writers in $9 from their places ($12, the
--            lowest seq each may still have untaken; rows below it are
--            the other arms'): transactions that were running when the
--            frontier passed their ids, or whose rows a claim left or
--            abandoned (watched_row);
--   ahead    due rows after the frontier ($4, $5) in writer order, those the
--            watched arm reads aside; with the database's log (CAPTURE=wal)
--            only those up to seq $6, or those fresh_lock.sql allows
--            (queries.go, freshRule).
-- Each arm takes what the arms before it left of the batch ($2), and locks
-- only rows it may take. $3 is the byte limit (payload + headers; 0: none).
-- Parameters (sqlParams in queries.go): .Held adds each row's
-- address (claim_held.sql); .Unkeyed narrows every read to the rows
-- without a key, for the unkeyed part of an ordered claim (claim_unkeyed).
WITH again AS (
    SELECT {% template "arm_columns" . %}, 0 AS arm
    FROM {{table}}
    WHERE {% template "again_rows" (arm .) %}
    ORDER BY available_at, seq
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), watched AS (
    SELECT {% template "arm_columns" . %}, 1 AS arm
    FROM {{table}}
    WHERE cardinality($9::text[]) > 0
      AND {% template "watched_rows" (arm .) %}
    ORDER BY {{writer}}, seq
    LIMIT greatest($2 - (SELECT count(*) FROM again), 0)
    FOR UPDATE SKIP LOCKED
), ahead AS (
    SELECT {% template "arm_columns" . %}, 2 AS arm
    FROM {{table}}
    WHERE {% template "ahead_rows" (arm .) %}
      AND event_id NOT IN (SELECT event_id FROM again)
    ORDER BY {{writer}}, seq
    LIMIT greatest($2 - (SELECT count(*) FROM again) - (SELECT count(*) FROM watched), 0)
    FOR UPDATE SKIP LOCKED
), skipped AS (
    -- What the arms read and did not take, read again without locking in
    -- the same snapshot: the first such row within what the ahead and
    -- again arms read, and the watched writers with such rows. The
    -- positions pass a row untaken only when it is not due yet and in the
    -- due index, where the again arm finds it once due. Any other was kept
    -- from the arms by another transaction's lock, which may end without
    -- changing it (a relay that died, a held claim's rows past its byte
    -- limit), or is not due at this claim's now() (its writer began after
    -- this transaction did, or set available_at ahead of the database's
    -- clock) while outside the due index: the relay's positions stop
    -- before it, and it keeps watching such writers.
    --
    -- Each arm's second read takes, in the arm's order from where the arm
    -- began, one row more than the arm returned: a row the arm skipped
    -- comes before the arm's last row, so the first of them is among
    -- those. (A row comparison as an upper bound would not stop the index
    -- scan on PostgreSQL before 17.) A read that went past the arm's last
    -- row matters only if the arm stopped short of its limit, having read
    -- to the end. Each second read shares its arm's row conditions, the
    -- arm's template (again_rows, watched_rows, ahead_rows) read with
    -- reread: without the lock, and for the ahead and watched reads also
    -- the rows outside the due index that are not due yet (due).
    (SELECT 'skip ahead' AS fact, writer, seq, NULL::timestamptz AS due_at
     FROM (SELECT event_id, {{writer}} AS writer, seq
           FROM {{table}}
           WHERE {% template "ahead_rows" (reread .) %}
           ORDER BY {{writer}}, seq
           -- None when the arms before left the ahead arm nothing to take:
           -- the read would step over the rows the watched arm reads (all
           -- the rest of a large writer's) for a row it cannot report.
           LIMIT CASE WHEN greatest($2 - (SELECT count(*) FROM again) - (SELECT count(*) FROM watched), 0) > 0
                      THEN (SELECT count(*) FROM ahead) + 1 ELSE 0 END) AS r
     WHERE event_id NOT IN (SELECT event_id FROM ahead)
       AND ((SELECT count(*) FROM ahead)
              < greatest($2 - (SELECT count(*) FROM again) - (SELECT count(*) FROM watched), 0)
            OR EXISTS (SELECT 1 FROM ahead f WHERE (f.writer, f.seq) > (r.writer, r.seq)))
     ORDER BY writer, seq
     LIMIT 1)
    UNION ALL
    (SELECT 'skip again', writer, seq, available_at
     FROM (SELECT event_id, {{writer}} AS writer, seq, available_at
           FROM {{table}}
           WHERE {% template "again_rows" (reread .) %}
           ORDER BY available_at, seq
           LIMIT (SELECT count(*) FROM again) + 1) AS r
     WHERE event_id NOT IN (SELECT event_id FROM again)
       AND ((SELECT count(*) FROM again) < $2
            OR EXISTS (SELECT 1 FROM again a WHERE (a.available_at, a.seq) > (r.available_at, r.seq)))
     ORDER BY available_at, seq
     LIMIT 1)
    UNION ALL
    -- The watched writers' rows from their places: when the watched arm
    -- read to the end, all of them, for the lowest such row of each
    -- writer; when it stopped at its limit, one row more than it returned,
    -- as for the ahead arm, for the first such row (frontier.watchedRead),
    -- so that the rest of a large writer's rows are not read at every
    -- claim.
    (SELECT 'skip watched', writer, min(seq), NULL::timestamptz
     FROM (SELECT event_id, {{writer}} AS writer, seq
           FROM {{table}}
           WHERE cardinality($9::text[]) > 0
             AND greatest($2 - (SELECT count(*) FROM again), 0) > 0
             AND {% template "watched_rows" (reread .) %}
           ORDER BY {{writer}}, seq
           LIMIT CASE WHEN (SELECT count(*) FROM watched) < greatest($2 - (SELECT count(*) FROM again), 0) THEN NULL
                      ELSE (SELECT count(*) FROM watched) + 1 END) AS r
     WHERE event_id NOT IN (SELECT event_id FROM watched)
     GROUP BY writer)
), locked AS (
    -- Taken within the byte limit: a running total in the arms' order, so
    -- that what a claim leaves is a tail of each arm (the first row is
    -- always taken, however large, so that none is stuck).
    SELECT *, ($3::bigint <= 0 OR sum(size) OVER w <= $3::bigint OR row_number() OVER w = 1) AS taken
    FROM (SELECT * FROM again UNION ALL SELECT * FROM watched UNION ALL SELECT * FROM ahead) AS arms
    WINDOW w AS (ORDER BY arm, CASE WHEN arm = 0 THEN available_at END, CASE WHEN arm = 0 THEN seq END,
                          writer, seq ROWS UNBOUNDED PRECEDING)
)
{%- end %}
