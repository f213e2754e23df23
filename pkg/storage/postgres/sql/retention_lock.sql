-- Take the table's retention lock if no other session holds it: a
-- session-level advisory lock keyed on the table's oid, so two tables of the
-- same name in different schemas have locks of their own. It needs no
-- grant. Answers true when taken.
SELECT pg_try_advisory_lock(hashtextextended('outbox_relay.retention.' || '{{table}}'::regclass::oid::text, 0))
