package pgwal

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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

// ReadSlot reads the slot named slot in db's database, over db (the
// store's pool: a gauge reads it at every scrape, which must not cost a
// connection each time).
func ReadSlot(ctx context.Context, db *sql.DB, slot string) (SlotStatus, error) {
	st := SlotStatus{Exists: true}
	err := db.QueryRowContext(ctx, `SELECT active, coalesce(wal_status, ''),
       coalesce(pg_wal_lsn_diff(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_receive_lsn() ELSE pg_current_wal_lsn() END,
                                restart_lsn), 0)::bigint
FROM pg_replication_slots
WHERE slot_name = $1 AND database = current_database()`, slot).Scan(&st.Active, &st.WALStatus, &st.RetainedBytes)
	if errors.Is(err, sql.ErrNoRows) {
		return SlotStatus{}, nil
	}
	if err != nil {
		return SlotStatus{}, fmt.Errorf("read replication slot %s: %w", slot, err)
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

// exec runs stmt on a connection of its own (not a replication one).
func (c Config) exec(ctx context.Context, what, stmt string) error {
	conn, err := connect(ctx, c.ConnString, false)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if _, err := conn.Exec(ctx, stmt).ReadAll(); err != nil {
		return fmt.Errorf("%s for %s: %w", what, c.quotedTable(), err)
	}
	return nil
}

// SlotName is the slot cfg reads: Slot, or NameDefault of the table.
func (c Config) SlotName() string { return c.withDefaults().Slot }

// PublicationName is the publication cfg reads: Publication, or
// NameDefault of the table.
func (c Config) PublicationName() string { return c.withDefaults().Publication }

// PublicationStatus is the publication as operators watch it: a slot can
// serve the relay only while it is as the reader opened it.
type PublicationStatus struct {
	Exists bool
	// PublishesTable is true when the table is in it (or it is FOR ALL
	// TABLES).
	PublishesTable bool
	// Inserts is true when it publishes inserts through the table itself
	// (publish includes insert, publish_via_partition_root).
	Inserts bool
}

// readPublicationSQL reads a publication ($1) and whether it holds the
// table ($2, as SQL names it).
const readPublicationSQL = `SELECT p.pubinsert AND p.pubviaroot,
       p.puballtables OR EXISTS (SELECT 1 FROM pg_publication_rel pr WHERE pr.prpubid = p.oid AND pr.prrelid = to_regclass($2))
FROM pg_publication p
WHERE p.pubname = $1`

// ReadPublication reads cfg's publication over db (the store's pool).
func ReadPublication(ctx context.Context, db *sql.DB, cfg Config) (PublicationStatus, error) {
	cfg = cfg.withDefaults()
	st := PublicationStatus{Exists: true}
	err := db.QueryRowContext(ctx, readPublicationSQL, cfg.Publication, cfg.quotedTable()).Scan(&st.Inserts, &st.PublishesTable)
	if errors.Is(err, sql.ErrNoRows) {
		return PublicationStatus{}, nil
	}
	if err != nil {
		return PublicationStatus{}, fmt.Errorf("read publication %s: %w", cfg.Publication, err)
	}
	return st, nil
}
