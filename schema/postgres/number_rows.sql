-- Number the unfinished rows of {{table}} that predate its seq column,
-- oldest first (their order within a transaction is lost), below the
-- numbers new rows have taken since the column was added, so that ordered
-- claims see them first. Delivered history keeps NULL. It locks these
-- rows, not the table; the comment that marked the work as pending goes
-- in the same transaction.
UPDATE {{table}} AS t SET seq = o.n
FROM (
    SELECT event_id, row_number() OVER (ORDER BY created_at, event_id) AS n
    FROM {{table}}
    WHERE seq IS NULL AND status <> 'DELIVERED'
) AS o
WHERE t.event_id = o.event_id AND t.seq IS NULL;
COMMENT ON COLUMN {{table}}.seq IS NULL;
