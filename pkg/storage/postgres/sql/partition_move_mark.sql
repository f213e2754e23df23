-- Marks the transaction that moves rows out of the default partition for
-- a relay reading the WAL (CAPTURE=wal): the moved rows' inserts are not
-- new events, and the log reader skips transactions carrying this message
-- (pgwal.MovePrefix). Nothing is written where the WAL is not logical.
SELECT pg_logical_emit_message(true, 'outbox-relay:move', '')
WHERE current_setting('wal_level') = 'logical'
