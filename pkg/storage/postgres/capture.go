package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/relay/pkg/capture/pgwal"
	schema "github.com/outbox-relay/relay/schema/postgres"
)

// What CAPTURE=wal needs in the database beside the table: a publication of
// the table's inserts (the relay makes its replication slot itself).

// PublicationDefault is the publication's name for a table: one per table,
// so that relays of two tables in one database do not read each other's:
// outbox_relay_<schema>_<table>, or outbox_relay_<table> for a table named
// without its schema.
func PublicationDefault(t schema.Table) string { return walName(t) }

// SlotDefault is the replication slot's name for a table, formed as
// PublicationDefault's. Slots are named server-wide: two databases of one
// server with tables of the same name need WAL_SLOT_NAME set apart.
func SlotDefault(t schema.Table) string { return walName(t) }

// walName is outbox_relay_ and the table's name; past PostgreSQL's 63
// characters it is cut and ends with a hash of the whole, so that two
// long names stay apart.
func walName(t schema.Table) string {
	name := "outbox_relay_" + t.Name
	if t.Schema != "" {
		name = "outbox_relay_" + t.Schema + "_" + t.Name
	}
	if len(name) <= 63 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return name[:54] + "_" + hex.EncodeToString(sum[:4])
}

// CreatePublication creates the publication when it does not exist.
func (s *Store) CreatePublication(ctx context.Context, name string) error {
	return s.publication(ctx, "create publication", "publication_create", name)
}

// DropPublication drops the publication when it exists.
func (s *Store) DropPublication(ctx context.Context, name string) error {
	return s.publication(ctx, "drop publication", "publication_drop", name)
}

func (s *Store) publication(ctx context.Context, what, query, name string) error {
	if !pgwal.Identifier(name) {
		return fmt.Errorf("%s: invalid name %q: use lowercase letters, digits and underscores", what, name)
	}
	q := strings.ReplaceAll(s.queries[query], "{{publication}}", name)
	if _, err := s.pool.Exec(ctx, q); err != nil {
		return fmt.Errorf("%s for %s in %s: %w", what, s.table, s.location(), err)
	}
	return nil
}

// WALSource returns the log reader of this store's table, over the
// store's connection unless cfg names another (WAL_STORAGE_URL).
func (s *Store) WALSource(cfg pgwal.Config) pgwal.Source {
	if cfg.ConnString == "" {
		cfg.ConnString = s.connURL
	}
	cfg.Schema, cfg.Table = s.table.Schema, s.table.Name
	return pgwal.Source{Config: cfg}
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

// SlotStatus reads the slot named name.
func (s *Store) SlotStatus(ctx context.Context, name string) (SlotStatus, error) {
	var st SlotStatus
	err := s.pool.QueryRow(ctx, s.queries["slot_status"], name).Scan(&st.Active, &st.WALStatus, &st.RetainedBytes)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("read replication slot %s: %w", name, err)
	}
	st.Exists = true
	return st, nil
}
