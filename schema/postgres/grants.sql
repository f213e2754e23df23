-- Least-privilege roles for Outbox Relay. Run it as the table's owner after
-- the schema, then grant the roles to login users:
--
--     CREATE ROLE relay_app LOGIN PASSWORD '…' IN ROLE outbox_relay;
--
-- outbox_relay     the relay: reads and updates rows (claim, settle, reap),
--                  deletes finished ones (DELIVERED_RETENTION,
--                  DEAD_RETENTION) and LISTENs for inserts (LISTEN and the
--                  retention lock, an advisory lock, need no grant); reads
--                  the seq sequence's last value (not nextval) for the
--                  backfill beside CAPTURE=wal.
-- outbox_producer  applications: insert events (and take seq values and,
--                  for an INSERT that names no event_id, run the id
--                  function, which a hardened database grants no one).
-- outbox_admin     relay-cli: everything above plus DELETE, for prune.
-- migrate needs CREATE on the schema; run it as the owner, not as these.
--
-- Roles are shared by every database of the server; running this again, or
-- for another table, only adds grants.
SELECT pg_advisory_xact_lock({{migration_lock}}); -- serialise concurrent runs

DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['outbox_relay', 'outbox_producer', 'outbox_admin'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', r);
        END IF;
    END LOOP;
    EXECUTE format('GRANT USAGE ON SCHEMA %s TO outbox_relay, outbox_producer, outbox_admin',
                   (SELECT relnamespace::regnamespace::text FROM pg_class WHERE oid = '{{table}}'::regclass));
END
$$;

GRANT SELECT, UPDATE, DELETE ON {{table}} TO outbox_relay;
GRANT SELECT ON SEQUENCE {{schema}}"{{name}}_seq" TO outbox_relay;
GRANT INSERT ON {{table}} TO outbox_producer;
GRANT USAGE ON SEQUENCE {{schema}}"{{name}}_seq" TO outbox_producer;
GRANT EXECUTE ON FUNCTION {{schema}}"{{name}}_event_id"() TO outbox_producer, outbox_admin;
GRANT SELECT, INSERT, UPDATE, DELETE ON {{table}} TO outbox_admin;
GRANT USAGE ON SEQUENCE {{schema}}"{{name}}_seq" TO outbox_admin;
