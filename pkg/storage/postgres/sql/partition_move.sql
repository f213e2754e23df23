-- Move the rows of [$1, $2) from the default partition ({{default}}) into
-- a new table ({{partition}}) about to become their partition.
WITH moved AS (
    DELETE FROM {{default}}
    WHERE created_at >= $1 AND created_at < $2
    RETURNING *
)
INSERT INTO {{partition}} SELECT * FROM moved
