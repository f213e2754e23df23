-- Outbox Relay schema for PostgreSQL 13 or later: the outbox table
-- {{table}}, its indexes and its insert trigger.
--
-- The table follows the Open Outbox table contract column for column, so the
-- relay can take over an existing Open Outbox table. Every statement is
-- idempotent and nothing is ever dropped: running this file again is safe.

CREATE TABLE IF NOT EXISTS {{table}} (
    event_id      UUID PRIMARY KEY DEFAULT gen_random_uuid(),
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
-- if missing: ALTER TABLE and CREATE INDEX take locks that block writers
-- even when IF NOT EXISTS finds nothing to do, and a relay may run this at
-- every start (STORAGE_AUTO_MIGRATE).
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
        ALTER TABLE {{table}} ALTER COLUMN seq SET DEFAULT nextval('{{schema}}"{{name}}_seq"');
        ALTER SEQUENCE {{schema}}"{{name}}_seq" OWNED BY {{table}}.seq;
        -- Number the unfinished rows that predate the column, oldest first
        -- (their order within a transaction is lost), so that ordered
        -- claims can compare (created_at, seq) without NULLs. Delivered
        -- history keeps NULL.
        UPDATE {{table}} AS t SET seq = o.n
        FROM (
            SELECT event_id, nextval('{{schema}}"{{name}}_seq"') AS n
            FROM (SELECT event_id FROM {{table}}
                  WHERE seq IS NULL AND status <> 'DELIVERED'
                  ORDER BY created_at, event_id) AS unfinished
        ) AS o
        WHERE t.event_id = o.event_id;
    END IF;
END
$$;

-- The indexes, all partial, so each holds only the rows one query needs:
--   pending_idx       the claim walks it oldest first;
--   pending_age_idx   the oldest pending age (stats, backlog gauges);
--   key_order_idx     ORDERING=partition walks the keys with unfinished
--                     events and reads each key's events in order; "C"
--                     collation so that the database and the relay agree on
--                     the order of keys;
--   key_dead_idx      ORDERING_ON_DEAD=block finds a DEAD event ahead of a
--                     key's first unfinished one;
--   unkeyed_idx       events without a key, which ORDERING=partition claims
--                     by age;
--   delivering_idx    the reaper finds expired leases;
--   delivered_idx,
--   dead_idx          pruning;
--   created_idx       the console and `relay-cli list`: every status, newest
--                     or oldest first, a page after a cursor one range of it
--                     (the only index that is not partial: it costs an
--                     entry per insert and per change of status);
--   key_idx           the same for the events of one partition key.
DO $$
DECLARE
    ix record;
BEGIN
    FOR ix IN SELECT * FROM (VALUES
        ('{{name}}_pending_idx', $d$(available_at, created_at) WHERE status = 'PENDING'$d$),
        ('{{name}}_pending_age_idx', $d$(created_at) WHERE status = 'PENDING'$d$),
        ('{{name}}_key_order_idx', $d$(partition_key COLLATE "C", created_at, seq NULLS FIRST)
            WHERE status IN ('PENDING', 'DELIVERING') AND partition_key IS NOT NULL$d$),
        ('{{name}}_key_dead_idx', $d$(partition_key COLLATE "C", created_at, seq NULLS FIRST)
            WHERE status = 'DEAD' AND partition_key IS NOT NULL$d$),
        ('{{name}}_unkeyed_idx', $d$(available_at, created_at)
            WHERE status = 'PENDING' AND (partition_key IS NULL OR partition_key = '')$d$),
        ('{{name}}_delivering_idx', $d$(locked_at) WHERE status = 'DELIVERING'$d$),
        ('{{name}}_delivered_idx', $d$(delivered_at) WHERE status = 'DELIVERED'$d$),
        ('{{name}}_dead_idx', $d$(updated_at) WHERE status = 'DEAD'$d$),
        ('{{name}}_created_idx', $d$(created_at, (COALESCE(seq, 0)), event_id)$d$),
        ('{{name}}_key_idx', $d$(partition_key, created_at, (COALESCE(seq, 0)), event_id)
            WHERE partition_key IS NOT NULL$d$)
    ) AS v(name, definition)
    LOOP
        IF to_regclass(format('%s%I', '{{schema}}', ix.name)) IS NULL THEN
            -- An index is always created in its table's schema.
            EXECUTE format('CREATE INDEX %I ON {{table}} %s', ix.name, ix.definition);
        END IF;
    END LOOP;
END
$$;

-- Wake relays as soon as events are committed: one notification per
-- inserting statement, delivered when its transaction commits. The channel
-- is the table's schema-qualified name however a relay spells it (cut to
-- PostgreSQL's 63-byte limit on channel names).
CREATE OR REPLACE FUNCTION {{schema}}"{{name}}_notify"() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(left(TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME, 63), '');
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
