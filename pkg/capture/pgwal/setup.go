package pgwal

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// What the reader needs in the database beside the table, the reader's
// own: a publication of the table's inserts, which CreatePublication makes
// (the reader makes its replication slot itself), and the slot as
// operators watch it (ReadSlot).

// CreatePublication creates cfg's publication (NameDefault of the table
// unless cfg names one) when it does not exist: inserts only — the relay's
// own updates and deletes are not events — and, for a partitioned table,
// as inserts into the table itself, whichever partition holds them. It
// needs the table's owner; running it again changes nothing.
func CreatePublication(ctx context.Context, cfg Config) error {
	cfg, err := cfg.prepared()
	if err != nil {
		return err
	}
	return cfg.exec(ctx, "create publication "+cfg.Publication, `DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = `+literal(cfg.Publication)+`) THEN
        CREATE PUBLICATION `+cfg.Publication+` FOR TABLE `+cfg.quotedTable()+`
            WITH (publish = 'insert', publish_via_partition_root = true);
    END IF;
END
$$`)
}

// DropPublication drops cfg's publication when it exists (CAPTURE=poll
// again); the slot goes separately (DropSlot), as it may be streaming.
func DropPublication(ctx context.Context, cfg Config) error {
	cfg, err := cfg.prepared()
	if err != nil {
		return err
	}
	return cfg.exec(ctx, "drop publication "+cfg.Publication, "DROP PUBLICATION IF EXISTS "+cfg.Publication)
}

// SlotStatus is a replication slot as operators watch it.
type SlotStatus struct {
	Exists bool
	// Active is true while a relay streams from it.
	Active bool
	// WALStatus is the server's word for what the slot keeps: reserved,
	// extended, unreserved or lost.
	WALStatus string
	// RetainedBytes is the WAL the slot keeps from removal.
	RetainedBytes int64
}

// ReadSlot reads cfg's slot (NameDefault of the table unless cfg names
// one) in cfg's database.
func ReadSlot(ctx context.Context, cfg Config) (SlotStatus, error) {
	var st SlotStatus
	cfg, err := cfg.prepared()
	if err != nil {
		return st, err
	}
	rows, err := cfg.query(ctx, `SELECT active, coalesce(wal_status, ''),
       coalesce(pg_wal_lsn_diff(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_receive_lsn() ELSE pg_current_wal_lsn() END,
                                restart_lsn), 0)::bigint
FROM pg_replication_slots
WHERE slot_name = `+literal(cfg.Slot)+` AND database = current_database()`)
	if err != nil {
		return st, fmt.Errorf("read replication slot %s: %w", cfg.Slot, err)
	}
	if len(rows) == 0 {
		return st, nil
	}
	st.Exists, st.Active, st.WALStatus = true, rows[0][0] == "t", rows[0][1]
	if st.RetainedBytes, err = strconv.ParseInt(rows[0][2], 10, 64); err != nil {
		return st, fmt.Errorf("read replication slot %s: retained bytes %q: %w", cfg.Slot, rows[0][2], err)
	}
	return st, nil
}

// quotedTable is the outbox table as SQL names it.
func (c Config) quotedTable() string {
	quote := func(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
	if c.Schema == "" {
		return quote(c.Table)
	}
	return quote(c.Schema) + "." + quote(c.Table)
}

// exec runs sql on a connection of its own (not a replication one).
func (c Config) exec(ctx context.Context, what, sql string) error {
	if _, err := c.query(ctx, sql); err != nil {
		return fmt.Errorf("%s for %s: %w", what, c.quotedTable(), err)
	}
	return nil
}

// query runs sql on a connection of its own (not a replication one) and
// returns its rows as text.
func (c Config) query(ctx context.Context, sql string) ([][]string, error) {
	conn, err := connect(ctx, c.ConnString, false)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	return (&Reader{cfg: c, conn: conn}).query(ctx, sql)
}

// SlotName is the slot cfg reads: Slot, or NameDefault of the table.
func (c Config) SlotName() string { return c.withDefaults().Slot }

// PublicationName is the publication cfg reads: Publication, or
// NameDefault of the table.
func (c Config) PublicationName() string { return c.withDefaults().Publication }
