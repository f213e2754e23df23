-- What holds a partition ({{partition}}) back, by status: its rows, and
-- those that keep it: every PENDING and DELIVERING row, DELIVERED rows
-- delivered within $1 microseconds (or never: delivered_at NULL, as prune
-- keeps them), DEAD rows that died (updated_at) within $2 microseconds. A
-- NULL retention keeps every row of its status. One scan, without locks;
-- partition_blocked.sql checks again under the lock.
SELECT status, count(*),
       count(*) FILTER (WHERE CASE status
           WHEN 'DELIVERED' THEN $1::bigint IS NULL OR delivered_at IS NULL
                                 OR delivered_at >= now() - $1::bigint * interval '1 microsecond'
           WHEN 'DEAD' THEN $2::bigint IS NULL OR updated_at >= now() - $2::bigint * interval '1 microsecond'
           ELSE true END)
FROM {{partition}}
GROUP BY status
