-- Outbox Relay schema for PostgreSQL 13 or later: the outbox table
-- {{table}}, its indexes, its insert trigger and its id function.
--
-- The table follows the Open Outbox table contract column for column, so the
-- relay can take over an existing Open Outbox table. Every statement is
-- idempotent, and nothing is dropped but indexes of earlier versions that
-- others replace: running this file again is safe.

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

-- The indexes, all partial but two, so each holds only the rows one query
-- needs:
--   pending_seq_idx   the PENDING rows in write order: the log's backfill
--                     check (CAPTURE=wal); claims read frontier_idx;
--   frontier_idx      claims go forward through it in the order of the
--                     rows' writers (writer_xid, then seq), from the
--                     relay's claim frontier, and look up the rows of
--                     writers that were running when the frontier passed
--                     their ids; ordered claims meet their keys there the
--                     same way; NULL (rows from before the column) reads
--                     as 0, the first;
--   due_at_idx        rows that became PENDING again (released, retried,
--                     reaped, retried from DEAD: each gets available_at =
--                     now() or later) and scheduled events: everything
--                     whose available_at is after its created_at. Claims
--                     find them here wherever their seq lies, in the order
--                     (available_at, seq) and from where their last ones
--                     ended. An event whose producer set created_at before
--                     the insert's now() is here from the start;
--   key_seq_idx       ORDERING=partition walks the keys with unfinished
--                     events and reads each key's events in write order;
--                     "C" collation so that the database and the relay
--                     agree on the order of keys;
--   key_dead_seq_idx  ORDERING_ON_DEAD=block finds a DEAD event ahead of a
--                     key's first unfinished one;
--   unkeyed_seq_idx   and
--   keyed_pending_idx no query reads them since claims go by the claim
--                     frontier (docs/architecture.md); kept until migrate
--                     can drop indexes without stopping writers;
--   delivering_idx    the reaper finds expired leases;
--   dead_idx          pruning DEAD rows;
--   created_idx       the console and `relay-cli list`: every status, newest
--                     or oldest first, a page after a cursor one range of it
--                     (not partial: it costs an entry per insert and per
--                     change of status); also the rows delivered within
--                     {{late_after}} of their creation (nearly all), for
--                     pruning and the counts of recent deliveries: such a
--                     row's created_at is at most that much before its
--                     delivered_at;
--   late_idx          the DELIVERED rows delivered later than that (or
--                     without a delivery time), by delivered_at: with
--                     created_idx, every DELIVERED row by when it was
--                     delivered, while a settle in time adds no entry here;
--   key_written_idx   the same for the events of one partition key, in
--                     write order (seq; created_at for rows written before
--                     seq existed), the order the relay delivers them in.
DO $$
DECLARE
    ix record;
    old text;
BEGIN
    FOR ix IN SELECT * FROM (VALUES
        ('{{name}}_pending_seq_idx', $d$(seq) WHERE status = 'PENDING'$d$),
        ('{{name}}_frontier_idx', $d$((COALESCE(writer_xid, '0'::xid8)), seq) WHERE status = 'PENDING'$d$),
        ('{{name}}_due_at_idx', $d$(available_at, seq) WHERE status = 'PENDING' AND available_at > created_at$d$),
        ('{{name}}_key_seq_idx', $d$(partition_key COLLATE "C", seq)
            WHERE status IN ('PENDING', 'DELIVERING') AND partition_key IS NOT NULL$d$),
        ('{{name}}_key_dead_seq_idx', $d$(partition_key COLLATE "C", seq)
            WHERE status = 'DEAD' AND partition_key IS NOT NULL$d$),
        ('{{name}}_unkeyed_seq_idx', $d$(seq)
            WHERE status = 'PENDING' AND (partition_key IS NULL OR partition_key = '')$d$),
        ('{{name}}_keyed_pending_idx', $d$(seq) WHERE status = 'PENDING' AND partition_key <> ''$d$),
        ('{{name}}_delivering_idx', $d$(locked_at) WHERE status = 'DELIVERING'$d$),
        ('{{name}}_late_idx', $d$(delivered_at) WHERE status = 'DELIVERED' AND {{delivered_late}}$d$),
        ('{{name}}_dead_idx', $d$(updated_at) WHERE status = 'DEAD'$d$),
        ('{{name}}_created_idx', $d$(created_at, (COALESCE(seq, 0)), event_id)$d$),
        ('{{name}}_key_written_idx', $d$(partition_key, (COALESCE(seq, 0)), created_at, event_id)
            WHERE partition_key IS NOT NULL$d$)
    ) AS v(name, definition)
    LOOP
        IF to_regclass(format('%s%I', '{{schema}}', ix.name)) IS NULL THEN
            -- An index is always created in its table's schema.
            EXECUTE format('CREATE INDEX %I ON {{table}} %s', ix.name, ix.definition);
        END IF;
    END LOOP;
    -- Indexes of earlier versions: those that ordered by created_at, which
    -- the ones above replace, pending_age_idx, whose question (the oldest
    -- pending event) the backlog answers while it counts the pending rows
    -- anyway, delivered_idx, which late_idx and created_idx replace,
    -- key_idx, which listed a key's events by created_at, and due_idx,
    -- which due_at_idx replaces (it ordered rows of one available_at by
    -- their place in the table). All but due_idx cost an entry per
    -- inserted or delivered row.
    FOREACH old IN ARRAY ARRAY['{{name}}_pending_idx', '{{name}}_key_order_idx',
                               '{{name}}_key_dead_idx', '{{name}}_unkeyed_idx',
                               '{{name}}_pending_age_idx', '{{name}}_delivered_idx',
                               '{{name}}_key_idx', '{{name}}_due_idx']
    LOOP
        IF to_regclass(format('%s%I', '{{schema}}', old)) IS NOT NULL THEN
            EXECUTE format('DROP INDEX %s%I', '{{schema}}', old);
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
