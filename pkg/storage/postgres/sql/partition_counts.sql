-- Rows by partition (its OID) and status, for `relay-cli partitions`: one
-- pass over the whole table.
SELECT tableoid, status, count(*)
FROM {{table}}
GROUP BY tableoid, status
