package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/postgres"
	"github.com/outbox-relay/relay/pkg/storage/storagetest"
)

// Harness runs the storagetest suite on PostgreSQL: every table in a
// schema of its own.
type Harness struct{}

var _ storagetest.Harness = Harness{}

// New creates a migrated table in a new schema (see New).
func (Harness) New(t testing.TB) storagetest.Table {
	t.Helper()
	return Conformance(New(t))
}

// Unmigrated opens a store on a table in a new, empty schema.
func (Harness) Unmigrated(t testing.TB) storage.Storage {
	t.Helper()
	return unmigrated(t)
}

func unmigrated(t testing.TB) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), storage.URLWithTable(URL(), NewSchema(t)+".openoutbox_events"))
	if err != nil {
		t.Fatalf("pgtest: open store: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// PartitionedHarness runs the storagetest suite on tables partitioned by
// By ("day" or "hour"): what works on a plain table must work on a
// partitioned one.
type PartitionedHarness struct{ By string }

var _ storagetest.Harness = PartitionedHarness{}

// New creates a migrated, partitioned table in a new schema.
func (h PartitionedHarness) New(t testing.TB) storagetest.Table {
	t.Helper()
	return Conformance(NewPartitioned(t, h.By))
}

// Unmigrated opens a store whose Migrate creates the table partitioned.
func (h PartitionedHarness) Unmigrated(t testing.TB) storage.Storage {
	t.Helper()
	return partitionedStore{unmigrated(t), h.By}
}

// partitionedStore is a Store whose Migrate is MigratePartitioned.
type partitionedStore struct {
	*postgres.Store
	by string
}

func (s partitionedStore) Migrate(ctx context.Context, opts storage.MigrateOptions) (storage.MigrateResult, error) {
	return s.MigratePartitioned(ctx, s.by, opts)
}

func (s partitionedStore) SchemaSQL() string { return s.PartitionedSchemaSQL(s.by) }

// NewSchema creates an empty schema that is dropped, with everything in it,
// when the test ends, and returns its name.
func NewSchema(t testing.TB) string {
	t.Helper()
	pool, err := adminPool()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	name := "t_" + randomHex(6)
	if _, err := pool.Exec(context.Background(), "CREATE SCHEMA "+name); err != nil {
		t.Fatalf("pgtest: create schema: %v", err)
	}
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), "DROP SCHEMA "+name+" CASCADE"); err != nil {
			t.Errorf("pgtest: drop schema %s: %v", name, err)
		}
	})
	return name
}

// NewDatabase creates an empty database on the test server, dropped when
// the test ends, and returns its URL: for a test whose statements wait for
// every older transaction in their database (CREATE INDEX CONCURRENTLY),
// which other tests' transactions must not hold up.
func NewDatabase(t testing.TB) string {
	t.Helper()
	pool, err := adminPool()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	name := "t_" + randomHex(6)
	if _, err := pool.Exec(context.Background(), "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(URL())
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

// newSchemaAt is NewSchema on another server; the schema goes with the
// test's database or cluster, or is dropped here.
func newSchemaAt(t testing.TB, serverURL string) string {
	t.Helper()
	if serverURL == URL() {
		return NewSchema(t)
	}
	conn, err := pgx.Connect(context.Background(), serverURL)
	if err != nil {
		t.Fatalf("pgtest: connect to %s: %v", serverURL, err)
	}
	defer conn.Close(context.Background())
	name := "t_" + randomHex(6)
	if _, err := conn.Exec(context.Background(), "CREATE SCHEMA "+name); err != nil {
		t.Fatalf("pgtest: create schema: %v", err)
	}
	return name
}

// adminPool is shared by every test of the process for creating and
// dropping schemas: a new connection for each costs more than the rest of
// a small test.
var adminPool = sync.OnceValues(func() (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(URL())
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", URL(), err)
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w (is PostgreSQL running? `make test` starts it)", URL(), err)
	}
	return pool, nil
})

// Conformance returns tb as the storagetest suite sees a table.
func Conformance(tb *Table) storagetest.Table { return conformance{tb} }

type conformance struct{ tb *Table }

func (c conformance) Storage() storage.Storage { return c.tb.Store }

func (c conformance) URL() string { return c.tb.URL }

func (c conformance) Insert(t testing.TB, cols outbox.Columns) {
	t.Helper()
	w, err := postgres.NewWriter(c.tb.Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteColumns(context.Background(), postgres.PgxTx(c.tb.Pool()), cols); err != nil {
		t.Fatalf("pgtest: insert %d events: %v", len(cols.IDs), err)
	}
}

func (c conformance) Set(t testing.TB, ch storagetest.Change, ids ...uuid.UUID) {
	t.Helper()
	var sets []string
	args := []any{ids}
	add := func(column string, value any) {
		args = append(args, value)
		sets = append(sets, fmt.Sprintf("%s = $%d", column, len(args)))
	}
	nullable := func(column string, v *string) {
		if v != nil {
			var value any
			if *v != "" {
				value = *v
			}
			add(column, value)
		}
	}
	moment := func(column string, ago *time.Duration) {
		if ago != nil {
			args = append(args, ago.Microseconds())
			sets = append(sets, fmt.Sprintf("%s = now() - $%d::bigint * interval '1 microsecond'", column, len(args)))
		}
	}
	if ch.Status != "" {
		add("status", string(ch.Status))
	}
	if ch.Attempts != nil {
		add("attempts", *ch.Attempts)
	}
	nullable("last_error", ch.LastError)
	nullable("locked_by", ch.LockedBy)
	moment("locked_at", ch.LockedAt)
	moment("delivered_at", ch.DeliveredAt)
	moment("created_at", ch.CreatedAt)
	moment("updated_at", ch.UpdatedAt)
	moment("available_at", ch.AvailableAt)
	if len(sets) == 0 {
		t.Fatal("pgtest: Set with an empty Change")
	}
	n := c.tb.Exec(t, "UPDATE {{table}} SET "+strings.Join(sets, ", ")+" WHERE event_id = ANY($1)", args...)
	if int(n) != len(ids) {
		t.Fatalf("pgtest: set %v: changed %d rows, want %d", ids, n, len(ids))
	}
}

func (c conformance) Rows(t testing.TB) []storage.Row {
	t.Helper()
	rows, err := c.tb.Pool().Query(context.Background(), `SELECT event_id, event_type, partition_key, payload,
		headers, status, attempts, last_error, available_at, locked_by, locked_at, delivered_at, created_at,
		updated_at, seq FROM `+c.tb.Name+` ORDER BY created_at, seq NULLS FIRST, event_id`)
	if err != nil {
		t.Fatalf("pgtest: read rows: %v", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (storage.Row, error) {
		var row storage.Row
		err := r.Scan(&row.ID, &row.Type, &row.PartitionKey, &row.Payload, &row.Headers, &row.Status,
			&row.Attempts, &row.LastError, &row.AvailableAt, &row.LockedBy, &row.LockedAt, &row.DeliveredAt,
			&row.CreatedAt, &row.UpdatedAt, &row.Seq)
		return row, err
	})
	if err != nil {
		t.Fatalf("pgtest: read rows: %v", err)
	}
	return out
}

func (c conformance) Now(t testing.TB) time.Time {
	t.Helper()
	var now time.Time
	if err := c.tb.Pool().QueryRow(context.Background(), "SELECT now()").Scan(&now); err != nil {
		t.Fatalf("pgtest: read the clock: %v", err)
	}
	return now
}

func (c conformance) Lock(t testing.TB, id uuid.UUID) func() {
	t.Helper()
	ctx := context.Background()
	tx, err := c.tb.Pool().Begin(ctx)
	if err != nil {
		t.Fatalf("pgtest: lock %s: %v", id, err)
	}
	var once sync.Once
	unlock := func() { once.Do(func() { _ = tx.Rollback(ctx) }) }
	t.Cleanup(unlock)
	tag, err := tx.Exec(ctx, "SELECT 1 FROM "+c.tb.Name+" WHERE event_id = $1 FOR UPDATE", id)
	if err != nil || tag.RowsAffected() != 1 {
		unlock()
		t.Fatalf("pgtest: lock %s: %d rows, %v", id, tag.RowsAffected(), err)
	}
	return unlock
}

func (c conformance) InsertUncommitted(t testing.TB, cols outbox.Columns) func() {
	t.Helper()
	ctx := context.Background()
	tx, err := c.tb.Pool().Begin(ctx)
	if err != nil {
		t.Fatalf("pgtest: begin: %v", err)
	}
	var once sync.Once
	end := func(commit bool) {
		once.Do(func() {
			if commit {
				if err := tx.Commit(ctx); err != nil {
					t.Errorf("pgtest: commit: %v", err)
				}
				return
			}
			_ = tx.Rollback(ctx)
		})
	}
	t.Cleanup(func() { end(false) })
	w, err := postgres.NewWriter(c.tb.Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteColumns(ctx, postgres.PgxTx(tx), cols); err != nil {
		end(false)
		t.Fatalf("pgtest: insert %d events: %v", len(cols.IDs), err)
	}
	return func() { end(true) }
}
