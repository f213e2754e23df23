package pgtest

import (
	"context"
	"sync"
	"testing"

	"github.com/outbox-relay/relay/pkg/capture/pgwal"
	schema "github.com/outbox-relay/relay/schema/postgres"
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

// HoldLogLock takes tb's log lock exclusively on a connection of its own,
// as a streaming log reader holds it (schema/postgres.LogLockClass), until
// the returned func or the test's end releases it.
func (tb *Table) HoldLogLock(t testing.TB) (release func()) {
	t.Helper()
	ctx := context.Background()
	pooled, err := tb.Pool().Acquire(ctx)
	if err != nil {
		t.Fatalf("pgtest: hold the log lock: %v", err)
	}
	conn := pooled.Hijack()
	if _, err := conn.Exec(ctx, schema.Expand("SELECT pg_advisory_lock({{log_lock}})", tb.Store.TableName())); err != nil {
		t.Fatalf("pgtest: hold the log lock: %v", err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			// At once: a closed session lets go only once its server
			// process has gone.
			_, _ = conn.Exec(ctx, schema.Expand("SELECT pg_advisory_unlock({{log_lock}})", tb.Store.TableName()))
			_ = conn.Close(ctx)
		})
	}
	t.Cleanup(release)
	return release
}
