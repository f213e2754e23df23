-- Release the lock retention_lock took, on the same session.
SELECT pg_advisory_unlock(hashtextextended('outbox_relay.retention.' || '{{table}}'::regclass::oid::text, 0))
