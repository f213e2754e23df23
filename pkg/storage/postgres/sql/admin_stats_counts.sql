-- Rows in flight and delivered, for `relay-cli stats`. Each count filters on
-- a partial index's predicate; recent deliveries are a range of the
-- delivered_at index. now() is the transaction's start, the snapshot's time.
-- $1 false skips the count of DELIVERED rows (0), which Stats then
-- estimates (admin_table_rows.sql).
SELECT (SELECT count(*) FROM {{table}} WHERE status = 'DELIVERING'),
       (SELECT count(*) FROM {{table}} WHERE status = 'DELIVERED' AND $1::boolean),
       d.last_minute, d.last_hour, now()
FROM (
    SELECT count(*) FILTER (WHERE delivered_at > now() - interval '1 minute') AS last_minute,
           count(*) AS last_hour
    FROM {{table}}
    WHERE status = 'DELIVERED' AND delivered_at > now() - interval '1 hour'
) AS d
