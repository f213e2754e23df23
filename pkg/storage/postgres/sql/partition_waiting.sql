-- Whether rows of [$1, $2) wait in the default partition ({{default}}).
SELECT EXISTS (SELECT 1 FROM {{default}} WHERE created_at >= $1 AND created_at < $2)
