-- Least-privilege roles for Outbox Relay on MySQL 8 and MariaDB 10.6 or
-- later. Run it as an account that may create roles and grant on the table
-- (root, or the table's owner with GRANT OPTION), after the schema, then
-- give login users a role and make it their default:
--
--     CREATE USER 'relay_app'@'%' IDENTIFIED BY '…';
--     GRANT outbox_relay TO 'relay_app'@'%';
--     SET DEFAULT ROLE outbox_relay FOR 'relay_app'@'%';   -- MariaDB
--     SET DEFAULT ROLE outbox_relay TO 'relay_app'@'%';    -- MySQL 8
--
-- outbox_relay     the relay: reads and updates rows (claim, settle, reap)
--                  and deletes finished ones (DELIVERED_RETENTION,
--                  DEAD_RETENTION). Ordered claims and retention take named
--                  locks (GET_LOCK), which need no grant. CAPTURE=binlog
--                  locks the row of <table>_log_lock (FOR UPDATE, shared):
--                  MySQL 8 wants SELECT and UPDATE for a locking read.
-- outbox_producer  applications: insert events.
-- outbox_admin     relay-cli: everything above plus DELETE, for prune.
-- migrate needs CREATE, ALTER and INDEX on the database; run it as the
-- owner, not as these.
--
-- Roles are shared by every database of the server; running this again, or
-- for another table, only adds grants. Grants outlive a dropped table: revoke
-- them (REVOKE ALL ON … FROM outbox_relay) when you drop one.
CREATE ROLE IF NOT EXISTS outbox_relay;
CREATE ROLE IF NOT EXISTS outbox_producer;
CREATE ROLE IF NOT EXISTS outbox_admin;
GRANT SELECT, UPDATE, DELETE ON {{table}} TO outbox_relay;
GRANT SELECT, UPDATE ON {{log_lock}} TO outbox_relay;
GRANT INSERT ON {{table}} TO outbox_producer;
GRANT SELECT, INSERT, UPDATE, DELETE ON {{table}} TO outbox_admin;
