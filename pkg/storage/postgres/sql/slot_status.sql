-- The CAPTURE=wal slot as operators watch it: whether a relay streams from
-- it, how the server rates what it keeps (wal_status: reserved, extended,
-- unreserved, lost) and how many bytes of WAL it keeps from removal.
SELECT active, coalesce(wal_status, ''),
       coalesce(pg_wal_lsn_diff(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_receive_lsn() ELSE pg_current_wal_lsn() END,
                                restart_lsn), 0)::bigint
FROM pg_replication_slots
WHERE slot_name = $1 AND database = current_database()
