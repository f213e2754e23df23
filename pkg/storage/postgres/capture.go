package postgres

import (
	"context"
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
// so that relays of two tables in one database do not read each other's
// (pgwal.NameDefault).
func PublicationDefault(t schema.Table) string { return pgwal.NameDefault(t.Schema, t.Name) }

// SlotDefault is the replication slot's name for a table, formed as
// PublicationDefault's. Slots are named server-wide: two databases of one
// server with tables of the same name need WAL_SLOT_NAME set apart.
func SlotDefault(t schema.Table) string { return pgwal.NameDefault(t.Schema, t.Name) }

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
