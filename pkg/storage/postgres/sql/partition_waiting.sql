-- How many rows of [$1, $2) wait in the default partition ({{default}}),
-- counting no further than $3.
SELECT count(*) FROM (
    SELECT 1 FROM {{default}} WHERE created_at >= $1 AND created_at < $2 LIMIT $3
) waiting
