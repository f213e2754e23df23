// Package mysqltest gives tests a real MySQL or MariaDB outbox table of
// their own: a fresh database per test, migrated, and dropped when the test
// ends, so tests run in parallel against one server and leave nothing
// behind. The server is TEST_MYSQL_URL, or the local MariaDB `make test`
// starts; NewAt puts the table on another (a private one from
// internal/mycluster, say).
package mysqltest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/mysql"
)

// DefaultURL is the server `make test` provides: root without a password.
const DefaultURL = "mysql://root@127.0.0.1:3306/"

// URL returns the test server's URL, without a database.
func URL() string {
	if u := os.Getenv("TEST_MYSQL_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// DatabaseURL returns URL() with database as its path.
func DatabaseURL(database string) string { return databaseURL(URL(), database) }

// databaseURL returns base with database as its path.
func databaseURL(base, database string) string {
	u, err := url.Parse(base)
	if err != nil {
		return base
	}
	u.Path = "/" + database
	return u.String()
}

// Table is a migrated outbox table private to one test.
type Table struct {
	Store *mysql.Store
	// URL is a storage URL naming the table, for starting another relay on it.
	URL string
	// Database is the test's own database.
	Database string
	// Name is the database-qualified table name.
	Name string

	// base is the URL of the server the table is on, without a
	// database.
	base string
}

// New creates a database and a migrated outbox table in it on the test
// server (URL). Both are dropped when the test ends.
func New(t testing.TB) *Table {
	t.Helper()
	return NewAt(t, URL())
}

// NewAt is New on the server at baseURL, a storage URL without a database
// (mysql://user@host:port/), such as a private server's from
// internal/mycluster: Cluster.URL("").
func NewAt(t testing.TB, baseURL string) *Table {
	t.Helper()
	database := newDatabaseAt(t, baseURL)
	storeURL := storage.URLWithTable(databaseURL(baseURL, database), "openoutbox_events")
	store, err := mysql.Open(context.Background(), storeURL)
	if err != nil {
		t.Fatalf("mysqltest: open store: %v", err)
	}
	t.Cleanup(store.Close)
	if _, err := store.Migrate(context.Background(), storage.MigrateOptions{}); err != nil {
		t.Fatalf("mysqltest: migrate: %v", err)
	}
	return &Table{Store: store, URL: storeURL, Database: database, Name: database + ".openoutbox_events", base: baseURL}
}

// Admin opens a plain database/sql pool on the test server as its
// administrator (the URL's user), for what a Store does not offer: creating
// databases, users and grants. The pool is closed when the test ends.
func Admin(t testing.TB) *sql.DB {
	t.Helper()
	return adminAt(t, URL())
}

// adminAt is Admin on the server at baseURL.
func adminAt(t testing.TB, baseURL string) *sql.DB {
	t.Helper()
	s, err := mysql.Open(context.Background(), storage.URLWithTable(databaseURL(baseURL, "mysql"), "admin"))
	if err != nil {
		t.Fatalf("mysqltest: open the server: %v", err)
	}
	t.Cleanup(s.Close)
	return s.DB()
}

// UserURL creates a user with password that may do anything in tb's
// database, on tb's server, and returns tb.URL changed to log in as it.
// The user is dropped when the test ends.
func (tb *Table) UserURL(t testing.TB, password string) string {
	t.Helper()
	db := adminAt(t, tb.server())
	user := "u_" + randomHex(6)
	for _, q := range []string{
		"CREATE USER '" + user + "'@'%' IDENTIFIED BY ?",
		"GRANT ALL PRIVILEGES ON `" + tb.Database + "`.* TO '" + user + "'@'%'",
	} {
		var args []any
		if strings.Contains(q, "?") {
			args = append(args, password)
		}
		if _, err := db.ExecContext(context.Background(), q, args...); err != nil {
			t.Fatalf("mysqltest: create user: %v", err)
		}
	}
	t.Cleanup(func() {
		if _, err := db.ExecContext(context.Background(), "DROP USER '"+user+"'@'%'"); err != nil {
			t.Errorf("mysqltest: drop user %s: %v", user, err)
		}
	})
	u, err := url.Parse(tb.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(user, password)
	return u.String()
}

// NewDatabase creates an empty database that is dropped, with everything in
// it, when the test ends, and returns its name. Grants on its tables are
// revoked first: MySQL keeps them after the tables are gone.
func NewDatabase(t testing.TB) string {
	t.Helper()
	return newDatabaseAt(t, URL())
}

// newDatabaseAt is NewDatabase on the server at baseURL.
func newDatabaseAt(t testing.TB, baseURL string) string {
	t.Helper()
	name := "t_" + randomHex(6)
	db := adminAt(t, baseURL)
	if _, err := db.ExecContext(context.Background(), "CREATE DATABASE "+name); err != nil {
		t.Fatalf("mysqltest: create database (is MariaDB running? `make test` starts it): %v", err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		if err := revokeTableGrants(ctx, db, name); err != nil {
			t.Errorf("mysqltest: revoke grants on %s: %v", name, err)
		}
		if _, err := db.ExecContext(ctx, "DROP DATABASE "+name); err != nil {
			t.Errorf("mysqltest: drop database %s: %v", name, err)
		}
	})
	return name
}

// revokeTableGrants removes every table privilege on database's tables.
func revokeTableGrants(ctx context.Context, db *sql.DB, database string) error {
	rows, err := db.QueryContext(ctx,
		"SELECT DISTINCT User, Host, Table_name FROM mysql.tables_priv WHERE Db = ?", database)
	if err != nil {
		return err
	}
	type grant struct{ user, host, table string }
	var grants []grant
	for rows.Next() {
		var g grant
		if err := rows.Scan(&g.user, &g.host, &g.table); err != nil {
			rows.Close()
			return err
		}
		grants = append(grants, g)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, g := range grants {
		grantee := "'" + g.user + "'"
		if g.host != "" {
			grantee += "@'" + g.host + "'"
		}
		if _, err := db.ExecContext(ctx, fmt.Sprintf("REVOKE ALL PRIVILEGES ON `%s`.`%s` FROM %s", database, g.table, grantee)); err != nil {
			return err
		}
	}
	return nil
}

// server is the URL of tb's server: URL() for a Table not made by New or
// NewAt.
func (tb *Table) server() string {
	if tb.base != "" {
		return tb.base
	}
	return URL()
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

// Insert writes events through the producer's insert (mysql.Writer) and
// returns their ids in order. Headers are written as given.
func (tb *Table) Insert(t testing.TB, events ...Event) []uuid.UUID {
	t.Helper()
	msgs := make([]outbox.Message, len(events))
	now := time.Now()
	for i, e := range events {
		if e.Type == "" {
			e.Type = "test.event"
		}
		if e.Payload == nil {
			e.Payload = fmt.Appendf(nil, `{"n":%d}`, i)
		}
		msgs[i] = outbox.Message{ID: e.ID, Type: e.Type, Key: e.PartitionKey, Payload: e.Payload}
		if e.AvailableIn != 0 {
			msgs[i].AvailableAt = now.Add(e.AvailableIn)
		}
	}
	c, err := outbox.Prepare(context.Background(), msgs)
	if err != nil {
		t.Fatalf("mysqltest: %v", err)
	}
	for i, e := range events {
		if e.Headers != "" {
			c.Headers[i] = e.Headers
		}
	}
	tb.insertColumns(t, c)
	return c.IDs
}

func (tb *Table) insertColumns(t testing.TB, c outbox.Columns) {
	t.Helper()
	w, err := mysql.NewWriter(tb.Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteColumns(context.Background(), tb.Store.DB(), c); err != nil {
		t.Fatalf("mysqltest: insert %d events: %v", len(c.IDs), err)
	}
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
	b := make([]byte, 0, size)
	b = append(b, head...)
	for range max(size-len(head)-2, 0) {
		b = append(b, 'x')
	}
	return append(b, `"}`...)
}

// Exec runs SQL against the test table's database; {{table}} in query is
// replaced by the table name. It returns the rows affected (matched, for
// an UPDATE).
func (tb *Table) Exec(t testing.TB, query string, args ...any) int64 {
	t.Helper()
	res, err := tb.Store.DB().ExecContext(context.Background(), strings.ReplaceAll(query, "{{table}}", tb.Name), args...)
	if err != nil {
		t.Fatalf("mysqltest: exec %q: %v", query, err)
	}
	n, _ := res.RowsAffected()
	return n
}

// Counts returns the number of rows in each status.
func (tb *Table) Counts(t testing.TB) map[outbox.Status]int {
	t.Helper()
	rows, err := tb.Store.DB().QueryContext(context.Background(),
		"SELECT status, COUNT(*) FROM "+tb.Name+" GROUP BY status")
	if err != nil {
		t.Fatalf("mysqltest: counts: %v", err)
	}
	defer rows.Close()
	counts := map[outbox.Status]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			t.Fatalf("mysqltest: counts: %v", err)
		}
		counts[outbox.Status(s)] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("mysqltest: counts: %v", err)
	}
	return counts
}

// Settled reports whether no row is PENDING or DELIVERING. It reads two
// short index ranges, so polling it does not load the server.
func (tb *Table) Settled(t testing.TB) bool {
	t.Helper()
	var busy bool
	err := tb.Store.DB().QueryRowContext(context.Background(),
		"SELECT EXISTS (SELECT 1 FROM "+tb.Name+" WHERE status = 'PENDING') OR EXISTS (SELECT 1 FROM "+tb.Name+" WHERE status = 'DELIVERING')").
		Scan(&busy)
	if err != nil {
		t.Fatalf("mysqltest: settled: %v", err)
	}
	return !busy
}
