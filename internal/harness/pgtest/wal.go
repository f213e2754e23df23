package pgtest

import (
	"context"
	"testing"

	"github.com/outbox-relay/relay/pkg/capture/pgwal"
)

// WAL returns cfg reading the log of tb's table over tb's connection (as
// the relay does when WAL_STORAGE_URL is not set), where cfg says nothing
// else.
func (tb *Table) WAL(cfg pgwal.Config) pgwal.Config {
	table := tb.Store.TableName()
	if cfg.ConnString == "" {
		cfg.ConnString = tb.Store.ConnString()
	}
	cfg.Schema, cfg.Table = table.Schema, table.Name
	return cfg
}

// CreatePublication creates the publication named name (empty: the
// table's default) of tb's table, as `relay-cli migrate --capture wal`
// does.
func (tb *Table) CreatePublication(t testing.TB, name string) {
	t.Helper()
	if err := pgwal.CreatePublication(context.Background(), tb.WAL(pgwal.Config{Publication: name})); err != nil {
		t.Fatalf("pgtest: create publication: %v", err)
	}
}
