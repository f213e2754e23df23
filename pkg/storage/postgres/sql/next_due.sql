-- How long until the earliest PENDING row due after $1 (the now() of the
-- relay's last claim) comes due, in microseconds by the database's clock,
-- 0 when it is due already: no row when none is. The relay asks before it
-- waits, and wakes then instead of at its next poll; a row that came due
-- between its claim and this question is taken at once. The
-- conditions are due_at_idx's, so that one probe at the index's edge, past
-- the rows already due, answers it (on a partitioned table one per
-- partition, merged): scheduled rows and rows backing off are there. A row
-- whose future available_at is not after its created_at (a producer that
-- set both ahead of the clock) is not, and waits for the poll.
SELECT greatest(ceil(extract(epoch FROM available_at - now()) * 1000000), 0)::bigint AS wait_us
FROM {{table}}
WHERE status = 'PENDING' AND available_at > created_at AND available_at > $1::timestamptz
ORDER BY available_at
LIMIT 1
