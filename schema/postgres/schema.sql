-- Outbox Relay schema for PostgreSQL 13 or later.
--
-- The table follows the Open Outbox table contract column for column, so the
-- relay can take over an existing openoutbox_events table. Every statement is
-- idempotent and nothing is ever dropped: running this file again is safe.
-- {{table}} is the (quoted) table name, {{name}} its bare name, {{schema}}
-- the quoted schema with a trailing dot when the name is schema-qualified,
-- and {{channel}} the NOTIFY channel relays listen on.

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
-- without a default first so that an existing table is not rewritten; rows
-- that predate it keep NULL and sort first.
CREATE SEQUENCE IF NOT EXISTS {{schema}}"{{name}}_seq";
ALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS seq BIGINT;
DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_attrdef d
        JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
        WHERE d.adrelid = '{{table}}'::regclass AND a.attname = 'seq'
    ) THEN
        ALTER TABLE {{table}} ALTER COLUMN seq SET DEFAULT nextval('{{schema}}"{{name}}_seq"');
        ALTER SEQUENCE {{schema}}"{{name}}_seq" OWNED BY {{table}}.seq;
    END IF;
END
$$;

-- Pickup: the claim query walks this index in order.
CREATE INDEX IF NOT EXISTS "{{name}}_pending_idx"
    ON {{table}} (available_at, created_at) WHERE status = 'PENDING';

-- Oldest pending age for stats and the backlog gauges.
CREATE INDEX IF NOT EXISTS "{{name}}_pending_age_idx"
    ON {{table}} (created_at) WHERE status = 'PENDING';

-- Strict per-key ordering (ORDERING=partition): the claim walks the keys
-- that still have unfinished events, and reads each key's events in order.
CREATE INDEX IF NOT EXISTS "{{name}}_key_order_idx"
    ON {{table}} (partition_key, created_at, seq)
    WHERE status IN ('PENDING', 'DELIVERING', 'DEAD') AND partition_key IS NOT NULL;

-- Events without a key (NULL or empty), which ORDERING=partition claims by
-- age.
CREATE INDEX IF NOT EXISTS "{{name}}_unkeyed_idx"
    ON {{table}} (available_at, created_at)
    WHERE status = 'PENDING' AND (partition_key IS NULL OR partition_key = '');

-- Stuck leases: the reaper finds expired DELIVERING rows here.
CREATE INDEX IF NOT EXISTS "{{name}}_delivering_idx"
    ON {{table}} (locked_at) WHERE status = 'DELIVERING';

-- Pruning delivered and dead rows.
CREATE INDEX IF NOT EXISTS "{{name}}_delivered_idx"
    ON {{table}} (delivered_at) WHERE status = 'DELIVERED';
CREATE INDEX IF NOT EXISTS "{{name}}_dead_idx"
    ON {{table}} (updated_at) WHERE status = 'DEAD';

-- Wake relays as soon as events are committed: one notification per
-- inserting statement, delivered when its transaction commits.
CREATE OR REPLACE FUNCTION {{schema}}"{{name}}_notify"() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('{{channel}}', '');
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
