-- The rows List selects, for `relay-cli list` and the console, at most
-- LIMIT. Payload and headers are left out: listing is for finding rows, and
-- payloads can be large. The filters placeholder is the driver's "AND <condition>" for
-- each filter set (adminListFilters), the dir one DESC for newest first or ASC.
-- The order placeholder is by creation time, created_idx's, so the newest
-- (or oldest) rows come off the index and a page after a cursor is a range
-- of it; with a key, in write order, key_written_idx's (see
-- storage.ListParams.WriteOrder);
-- with a status, the planner may prefer that status's partial index.
SELECT event_id, event_type, partition_key, status, attempts, last_error,
       available_at, locked_by, locked_at, delivered_at, created_at, updated_at, seq,
       (extract(epoch FROM now() - created_at) * 1000000)::bigint
FROM {{table}}
WHERE TRUE{{filters}}
ORDER BY {{order}}
LIMIT {{limit}}
