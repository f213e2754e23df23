package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/outbox-relay/relay/pkg/capture/pgwal"
)

// What CAPTURE=wal needs in the database beside the table: a publication of
// the table's inserts (the relay makes its replication slot itself).

// PublicationDefault is the publication's name for a table: one per table,
// so that relays of two tables in one database do not read each other's.
func PublicationDefault(table string) string { return "outbox_relay_" + table }

// SlotDefault is the replication slot's name for a table. Slots are named
// server-wide: two databases of one server with tables of the same name
// need WAL_SLOT_NAME set apart.
func SlotDefault(table string) string { return "outbox_relay_" + table }

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

// WALSource returns the log reader of this store's table.
func (s *Store) WALSource(cfg pgwal.Config) pgwal.Source {
	cfg.ConnString, cfg.Schema, cfg.Table = s.connURL, s.table.Schema, s.table.Name
	return pgwal.Source{Config: cfg}
}
