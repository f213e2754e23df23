// Package pgtest gives tests a real PostgreSQL outbox table of their own: a
// fresh schema per test, migrated, and dropped when the test ends, so tests
// run in parallel against one server and leave nothing behind. The server is
// TEST_DATABASE_URL, or the local one `make test` starts.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/postgres"
)

// DefaultURL is the server `make test` provides.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// URL returns the test server's URL.
func URL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// Table is a migrated outbox table private to one test.
type Table struct {
	Store *postgres.Store
	// URL is a storage URL naming the table, for starting another relay on it.
	URL string
	// Name is the schema-qualified table name.
	Name string

	pool func() *pgxpool.Pool
}

// Pool is a connection pool of the test's own to the table's database, for
// the SQL a test runs beside the store: opened at the first call, closed
// when the test ends.
func (tb *Table) Pool() *pgxpool.Pool { return tb.pool() }

// New creates a schema and a migrated outbox table in it. Both are dropped
// when the test ends.
func New(t testing.TB) *Table {
	t.Helper()
	return newTable(t, "")
}

// NewPartitioned is New with the table partitioned by by ("day" or
// "hour"), as `relay-cli migrate --partition-by` creates it.
func NewPartitioned(t testing.TB, by string) *Table {
	t.Helper()
	return newTable(t, by)
}

// NewAt is New on the server (or database) at serverURL, such as a private
// cluster a test started (internal/pgcluster).
func NewAt(t testing.TB, serverURL string) *Table {
	t.Helper()
	return newTableAt(t, serverURL, "")
}

func newTable(t testing.TB, partitionBy string) *Table {
	t.Helper()
	return newTableAt(t, URL(), partitionBy)
}

func newTableAt(t testing.TB, serverURL, partitionBy string) *Table {
	t.Helper()
	ctx := context.Background()
	name := newSchemaAt(t, serverURL) + ".openoutbox_events"
	storeURL := storage.URLWithTable(serverURL, name)
	store, err := postgres.Open(ctx, storeURL)
	if err != nil {
		t.Fatalf("pgtest: open store: %v", err)
	}
	t.Cleanup(store.Close)
	if partitionBy != "" {
		_, err = store.MigratePartitioned(ctx, partitionBy, storage.MigrateOptions{})
	} else {
		_, err = store.Migrate(ctx, storage.MigrateOptions{})
	}
	if err != nil {
		t.Fatalf("pgtest: migrate: %v", err)
	}
	return Of(t, store, storeURL, name)
}

// Of is the Table of a store a test opened itself on a table it made: url
// names the table as a storage URL (empty when the test does not need
// it), name as SQL does.
func Of(t testing.TB, store *postgres.Store, url, name string) *Table {
	tb := &Table{Store: store, URL: url, Name: name}
	tb.pool = sync.OnceValue(func() *pgxpool.Pool {
		pool, err := pgxpool.New(context.Background(), store.ConnString())
		if err != nil {
			t.Fatalf("pgtest: open a pool: %v", err)
		}
		t.Cleanup(pool.Close)
		return pool
	})
	return tb
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Event is a row to insert; zero fields get defaults: a new UUIDv7, type
// "test.event", no key, payload {"n":<index>}, headers {}.
type Event struct {
	ID           uuid.UUID
	Type         string
	PartitionKey string
	Payload      []byte
	Headers      string
	// AvailableIn delays the event.
	AvailableIn time.Duration
}

// Insert writes events through the producer's insert (postgres.Writer), in
// one statement, and returns their ids in order. Headers are written as
// given, so a test can store what no producer helper would.
func (tb *Table) Insert(t testing.TB, events ...Event) []uuid.UUID {
	t.Helper()
	msgs := make([]outbox.Message, len(events))
	now := time.Now()
	for i, e := range events {
		if e.Type == "" {
			e.Type = "test.event"
		}
		if e.Payload == nil {
			e.Payload = []byte(fmt.Sprintf(`{"n":%d}`, i))
		}
		msgs[i] = outbox.Message{ID: e.ID, Type: e.Type, Key: e.PartitionKey, Payload: e.Payload}
		if e.AvailableIn != 0 {
			msgs[i].AvailableAt = now.Add(e.AvailableIn)
		}
	}
	c, err := outbox.Prepare(context.Background(), msgs)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	for i, e := range events {
		if e.Headers != "" {
			c.Headers[i] = e.Headers
		}
	}
	w, err := postgres.NewWriter(tb.Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteColumns(context.Background(), postgres.PgxTx(tb.Pool()), c); err != nil {
		t.Fatalf("pgtest: insert %d events: %v", len(events), err)
	}
	return c.IDs
}

// InsertN writes n events of one type, each with a 200-byte payload.
func (tb *Table) InsertN(t testing.TB, n int, eventType string) []uuid.UUID {
	t.Helper()
	events := make([]Event, n)
	for i := range events {
		events[i] = Event{Type: eventType, Payload: Payload(i, 200)}
	}
	return tb.Insert(t, events...)
}

// Payload returns a JSON payload of exactly size bytes numbered n.
func Payload(n, size int) []byte {
	head := fmt.Sprintf(`{"n":%d,"pad":"`, n)
	pad := size - len(head) - 2
	if pad < 0 {
		pad = 0
	}
	b := make([]byte, 0, size)
	b = append(b, head...)
	for range pad {
		b = append(b, 'x')
	}
	return append(b, `"}`...)
}

// Counts returns the number of rows in each status.
func (tb *Table) Counts(t testing.TB) map[outbox.Status]int {
	t.Helper()
	rows, err := tb.Pool().Query(context.Background(),
		"SELECT status, count(*) FROM "+tb.Name+" GROUP BY status")
	if err != nil {
		t.Fatalf("pgtest: counts: %v", err)
	}
	counts := map[outbox.Status]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			t.Fatalf("pgtest: counts: %v", err)
		}
		counts[outbox.Status(s)] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("pgtest: counts: %v", err)
	}
	return counts
}

// Row is the state of one outbox row.
type Row struct {
	Status      outbox.Status
	Attempts    int
	LastError   string
	LockedBy    string
	AvailableAt time.Time
	DeliveredAt *time.Time
}

// Get reads one row's state.
func (tb *Table) Get(t testing.TB, id uuid.UUID) Row {
	t.Helper()
	var r Row
	var lastErr, lockedBy *string
	err := tb.Pool().QueryRow(context.Background(),
		"SELECT status, attempts, last_error, locked_by, available_at, delivered_at FROM "+tb.Name+" WHERE event_id = $1", id).
		Scan(&r.Status, &r.Attempts, &lastErr, &lockedBy, &r.AvailableAt, &r.DeliveredAt)
	if err != nil {
		t.Fatalf("pgtest: get %s: %v", id, err)
	}
	if lastErr != nil {
		r.LastError = *lastErr
	}
	if lockedBy != nil {
		r.LockedBy = *lockedBy
	}
	return r
}

// Exec runs SQL against the test table's database; {{table}} in sql is
// replaced by the table name.
func (tb *Table) Exec(t testing.TB, sql string, args ...any) int64 {
	t.Helper()
	tag, err := tb.Pool().Exec(context.Background(), strings.ReplaceAll(sql, "{{table}}", tb.Name), args...)
	if err != nil {
		t.Fatalf("pgtest: exec %q: %v", sql, err)
	}
	return tag.RowsAffected()
}

// HoldWriter opens a transaction that has an id and keeps it open until
// the test ends: another session's writer, as on any busy database, which
// every relay's claim frontier watches from when it passes the
// transaction's id until a claim's snapshot sees it ended.
func (tb *Table) HoldWriter(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	tx, err := tb.Pool().Begin(ctx)
	if err != nil {
		t.Fatalf("pgtest: hold a writer: %v", err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	if _, err := tx.Exec(ctx, "SELECT pg_current_xact_id()"); err != nil {
		t.Fatalf("pgtest: hold a writer: %v", err)
	}
}

// Held counts the PENDING rows another transaction holds locked: the
// batches that held claims (LEASE_MODE=lock) have at the broker.
func (tb *Table) Held(t testing.TB) int {
	t.Helper()
	var n int
	err := tb.Pool().QueryRow(context.Background(),
		"SELECT (SELECT count(*) FROM "+tb.Name+" WHERE status = 'PENDING') - "+
			"(SELECT count(*) FROM (SELECT 1 FROM "+tb.Name+" WHERE status = 'PENDING' FOR UPDATE SKIP LOCKED) AS free)").
		Scan(&n)
	if err != nil {
		t.Fatalf("pgtest: held: %v", err)
	}
	return n
}

// Settled reports whether no row is PENDING or DELIVERING. It reads only
// the partial indexes, so polling it does not load the server.
func (tb *Table) Settled(t testing.TB) bool {
	t.Helper()
	var busy bool
	err := tb.Pool().QueryRow(context.Background(),
		"SELECT EXISTS (SELECT 1 FROM "+tb.Name+" WHERE status = 'PENDING') OR EXISTS (SELECT 1 FROM "+tb.Name+" WHERE status = 'DELIVERING')").
		Scan(&busy)
	if err != nil {
		t.Fatalf("pgtest: settled: %v", err)
	}
	return !busy
}
