-- Outbox Relay schema for PostgreSQL 13 or later: the outbox table
-- {{table}}, its indexes, its insert trigger and its id function.
--
-- The table follows the Open Outbox table contract column for column, so the
-- relay can take over an existing Open Outbox table. Every statement is
-- idempotent and drops nothing: running this file again is safe. Each
-- change to an existing table takes a lock that is held only for a
-- moment (no table is rewritten or read under it); `relay-cli migrate`
-- runs this file under a short lock_timeout and tries again when a lock
-- is not free in time.

-- A new event's id when its INSERT names none: a UUIDv7 (RFC 9562), whose
-- first 48 bits are the Unix time in milliseconds and the rest random. Ids
-- made later sort later, so each new row's primary-key entry lands at the
-- right-hand end of the index, and a batch of settles (each writes a new
-- entry next to the row's old one) touches a few neighbouring index pages
-- instead of one random page per event: with gen_random_uuid() the same
-- drain cost the database a quarter to a third more CPU. Names are qualified so
-- that no search_path can put another function in its place; the planner
-- inlines it into each INSERT.
CREATE OR REPLACE FUNCTION {{schema}}"{{name}}_event_id"() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
    SELECT pg_catalog.encode(
        -- version 7 (0111) where gen_random_uuid() wrote 4 (0100); its
        -- variant bits stay
        pg_catalog.set_bit(pg_catalog.set_bit(
            pg_catalog.overlay(pg_catalog.uuid_send(pg_catalog.gen_random_uuid()),
                pg_catalog.substr(pg_catalog.int8send(pg_catalog.floor(
                    pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()) * 1000)::bigint), 3),
                1, 6),
            52, 1), 53, 1),
        'hex')::uuid
$$;

CREATE TABLE IF NOT EXISTS {{table}} (
    event_id      UUID PRIMARY KEY DEFAULT {{schema}}"{{name}}_event_id"(),
    event_type    TEXT NOT NULL,
    partition_key TEXT,
    payload       BYTEA NOT NULL,
    headers       JSONB NOT NULL DEFAULT '{}',
    status        TEXT NOT NULL DEFAULT 'PENDING',
    attempts      INT NOT NULL DEFAULT 0,
    last_error    TEXT,
    available_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    locked_by     TEXT,
    locked_at     TIMESTAMPTZ,
    delivered_at  TIMESTAMPTZ,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT check_valid_status CHECK (status IN ('PENDING', 'DELIVERING', 'DELIVERED', 'DEAD'))
);

-- seq records insertion order. Rows written in one transaction share
-- created_at, so created_at alone cannot order them. The column is added
-- without a default first so that an existing table is not rewritten; the
-- unfinished rows that predate it are numbered once, the delivered ones keep
-- NULL (which sorts first). Every change below is made only
-- if missing: ALTER TABLE takes a lock that blocks writers even when IF
-- NOT EXISTS finds nothing to do, and a relay may run this at every start
-- (STORAGE_AUTO_MIGRATE).
CREATE SEQUENCE IF NOT EXISTS {{schema}}"{{name}}_seq";
DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_attribute
        WHERE attrelid = '{{table}}'::regclass AND attname = 'seq' AND NOT attisdropped
    ) THEN
        ALTER TABLE {{table}} ADD COLUMN seq BIGINT;
    END IF;
    IF NOT EXISTS (
        SELECT 1 FROM pg_attrdef d
        JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
        WHERE d.adrelid = '{{table}}'::regclass AND a.attname = 'seq'
    ) THEN
        -- The unfinished rows that predate the column are numbered after
        -- this transaction (number_rows.sql), so that no lock is held
        -- while it reads the table: new rows start above the numbers they
        -- will get, and the column's comment marks the work as pending.
        IF EXISTS (SELECT 1 FROM {{table}} LIMIT 1) THEN
            PERFORM setval('{{schema}}"{{name}}_seq"', greatest({{seq_reserved}},
                (SELECT last_value FROM {{schema}}"{{name}}_seq")));
            COMMENT ON COLUMN {{table}}.seq IS '{{seq_numbering}}';
        END IF;
        ALTER TABLE {{table}} ALTER COLUMN seq SET DEFAULT nextval('{{schema}}"{{name}}_seq"');
        ALTER SEQUENCE {{schema}}"{{name}}_seq" OWNED BY {{table}}.seq;
    END IF;
    -- writer_xid is the id of the transaction that last made the row
    -- claimable: the producer's INSERT (or COPY), or the statement that
    -- handed it back to the claims. Evaluating the default assigns the
    -- writer its id before the row exists, so any snapshot taken while the
    -- row is on its way shows its writer as running: claims go forward by
    -- it (see "The claim frontier" in docs/architecture.md). Added without
    -- a default, then given one, so that no table is rewritten; rows from
    -- before keep NULL, which claims read as a writer that ended long ago.
    IF NOT EXISTS (
        SELECT 1 FROM pg_attribute
        WHERE attrelid = '{{table}}'::regclass AND attname = 'writer_xid' AND NOT attisdropped
    ) THEN
        ALTER TABLE {{table}} ADD COLUMN writer_xid xid8;
    END IF;
    IF NOT EXISTS (
        SELECT 1 FROM pg_attrdef d
        JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
        WHERE d.adrelid = '{{table}}'::regclass AND a.attname = 'writer_xid'
    ) THEN
        ALTER TABLE {{table}} ALTER COLUMN writer_xid SET DEFAULT pg_catalog.pg_current_xact_id();
    END IF;
    -- An id default of gen_random_uuid() (an Open Outbox table's, or one
    -- this file created before it had the function above) becomes that
    -- function. Setting a default rewrites nothing and applies to
    -- rows inserted from then on; a default the application chose is left
    -- as it is.
    IF EXISTS (
        SELECT 1 FROM pg_attrdef d
        JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
        WHERE d.adrelid = '{{table}}'::regclass AND a.attname = 'event_id'
          AND pg_get_expr(d.adbin, d.adrelid) = 'gen_random_uuid()'
    ) THEN
        ALTER TABLE {{table}} ALTER COLUMN event_id SET DEFAULT {{schema}}"{{name}}_event_id"();
    END IF;
END
$$;

-- The indexes are created after this file, one by one and CONCURRENTLY
-- (see Indexes in schema.go and the end of `relay-cli migrate --print`),
-- so that building them never stops the application's writes.

-- A row's writer is the transaction that last made it claimable, whatever
-- the statement names: an application that copies rows (INSERT … SELECT *
-- from an archive, a restore by hand), sets writer_xid itself, updates a
-- row so that claims must look at it again, or a logical replica's apply
-- worker, which carries the publisher's values and ids from another
-- cluster, would otherwise place rows behind every relay's claim frontier,
-- where only a sweep finds them, or far ahead of it. So the triggers fire
-- on INSERT and on an UPDATE that leaves a row PENDING and changes what
-- claims go by (its writer, status, schedule, created_at or key), and
-- ALWAYS: ordinary triggers do not fire while session_replication_role is
-- replica, as the apply worker runs. An update of attempts or last_error
-- alone keeps the row's place. The WHEN clauses skip the function for the
-- rows the column's default or a hand-back filled and for every update
-- that takes a row out of PENDING (a claim, a settle), so the usual write
-- pays a comparison or two. (A CHECK would also refuse the updates and the
-- replica's inserts; column grants bind no table owner.)
CREATE OR REPLACE FUNCTION {{schema}}"{{name}}_writer"() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.writer_xid := pg_catalog.pg_current_xact_id();
    RETURN NEW;
END
$$;

DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_trigger
        WHERE tgrelid = '{{table}}'::regclass AND tgname = '{{name}}_writer'
    ) THEN
        CREATE TRIGGER "{{name}}_writer"
            BEFORE INSERT ON {{table}}
            FOR EACH ROW
            WHEN (NEW.writer_xid IS DISTINCT FROM pg_catalog.pg_current_xact_id())
            EXECUTE FUNCTION {{schema}}"{{name}}_writer"();
    END IF;
    IF NOT EXISTS (
        SELECT 1 FROM pg_trigger
        WHERE tgrelid = '{{table}}'::regclass AND tgname = '{{name}}_writer_update'
    ) THEN
        CREATE TRIGGER "{{name}}_writer_update"
            BEFORE UPDATE ON {{table}}
            FOR EACH ROW
            WHEN (NEW.status = 'PENDING'
                  AND NEW.writer_xid IS DISTINCT FROM pg_catalog.pg_current_xact_id()
                  AND (OLD.status <> 'PENDING'
                       OR NEW.writer_xid IS DISTINCT FROM OLD.writer_xid
                       OR NEW.available_at IS DISTINCT FROM OLD.available_at
                       OR NEW.created_at IS DISTINCT FROM OLD.created_at
                       OR NEW.partition_key IS DISTINCT FROM OLD.partition_key))
            EXECUTE FUNCTION {{schema}}"{{name}}_writer"();
    END IF;
    -- ALWAYS, the writer trigger of an earlier version included.
    IF EXISTS (
        SELECT 1 FROM pg_trigger
        WHERE tgrelid = '{{table}}'::regclass AND tgname = '{{name}}_writer' AND tgenabled <> 'A'
    ) THEN
        ALTER TABLE {{table}} ENABLE ALWAYS TRIGGER "{{name}}_writer";
    END IF;
    IF EXISTS (
        SELECT 1 FROM pg_trigger
        WHERE tgrelid = '{{table}}'::regclass AND tgname = '{{name}}_writer_update' AND tgenabled <> 'A'
    ) THEN
        ALTER TABLE {{table}} ENABLE ALWAYS TRIGGER "{{name}}_writer_update";
    END IF;
END
$$;

-- Wake relays as soon as events are committed: one notification per
-- inserting statement, delivered when its transaction commits. The channel
-- is the table's schema-qualified name however a relay spells it (cut to
-- PostgreSQL's 63-byte limit on channel names). A transaction that has
-- notified cannot PREPARE TRANSACTION, so a two-phase producer (XA, JTA)
-- sets outbox.notify to off, for its transaction, role or database; the
-- relays see its transactions end through pg_prepared_xacts instead
-- (docs/architecture.md, "Wakeups"). The trigger is not ALWAYS: a
-- subscription with two_phase applies by PREPARE too.
CREATE OR REPLACE FUNCTION {{schema}}"{{name}}_notify"() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('outbox.notify', true) IS DISTINCT FROM 'off' THEN
        PERFORM pg_notify(left(TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME, 63), '');
    END IF;
    RETURN NULL;
END
$$;

DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_trigger
        WHERE tgrelid = '{{table}}'::regclass AND tgname = '{{name}}_notify'
    ) THEN
        CREATE TRIGGER "{{name}}_notify"
            AFTER INSERT ON {{table}}
            FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}"{{name}}_notify"();
    END IF;
END
$$;
