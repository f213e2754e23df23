-- The backlog, cheap enough for a metrics scrape every few seconds. Each
-- part filters on a partial index's predicate (status = 'PENDING',
-- status = 'DEAD'), so only waiting and dead rows are read, never the
-- delivered history that makes up most of the table. The oldest age counts
-- only events that are due: one scheduled for next week is not late.
-- (While an old snapshot holds vacuum back, the PENDING index also holds
-- an entry for each row claimed since, which the count steps over.)
SELECT p.new, p.retrying, p.oldest,
       coalesce(extract(epoch FROM now() - p.oldest) * 1000000, 0)::bigint,
       (SELECT count(*) FROM {{table}} WHERE status = 'DEAD')
FROM (
    SELECT count(*) FILTER (WHERE attempts = 0) AS new,
           count(*) FILTER (WHERE attempts > 0) AS retrying,
           min(created_at) FILTER (WHERE available_at <= now()) AS oldest
    FROM {{table}}
    WHERE status = 'PENDING'
) AS p
