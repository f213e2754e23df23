package inbox_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/inbox"
)

// mysqlDSNDefault is the MariaDB server `make test` provides.
const mysqlDSNDefault = "root@tcp(127.0.0.1:3306)/"

// mysqlDSN is the test MySQL or MariaDB server: TEST_MYSQL_DSN (a
// go-sql-driver DSN without a database), or the local one.
func mysqlDSN() string {
	if d := os.Getenv("TEST_MYSQL_DSN"); d != "" {
		return d
	}
	return mysqlDSNDefault
}

// backend is a real database of one dialect, given to each test fresh.
type backend struct {
	name    string
	dialect inbox.Dialect
	open    func(t testing.TB) *env
}

// env is one test's database: a schema (PostgreSQL) or database (MySQL)
// of its own holding an inbox and an effects table, dropped at the end.
type env struct {
	db *sql.DB
	// space is the schema or database name: unique to the test.
	space string
	box   *inbox.Inbox
	// effects is the qualified effects table: event_id → times applied.
	effects string
	// increment is the non-idempotent effect: +1 for $1 / ? event id.
	increment string
	// ago is an SQL expression for "so many hours ago" (%d).
	ago string
	// lockWaits counts this test's statements waiting for a row lock.
	lockWaits string
}

var backends = []backend{
	{name: "postgres", dialect: inbox.Postgres, open: openPostgres},
	{name: "mariadb", dialect: inbox.MySQL, open: openMySQL},
}

func forEachBackend(t *testing.T, test func(t *testing.T, e *env)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			test(t, b.open(t))
		})
	}
}

func openPostgres(t testing.TB) *env {
	t.Helper()
	space := strings.Split(pgtest.New(t).Name, ".")[0]
	db, err := sql.Open("pgx", pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(20)
	t.Cleanup(func() { _ = db.Close() })
	e := &env{
		db:        db,
		space:     space,
		effects:   space + ".effects",
		increment: "INSERT INTO " + space + ".effects (event_id, n) VALUES ($1, 1) ON CONFLICT (event_id) DO UPDATE SET n = effects.n + 1",
		ago:       "now() - interval '%d hours'",
		lockWaits: "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%" + space + "%'",
	}
	mustExec(t, db, "CREATE TABLE "+e.effects+" (event_id text PRIMARY KEY, n int NOT NULL)")
	e.box = newInbox(t, inbox.Config{Dialect: inbox.Postgres, Table: space + ".inbox"})
	createTable(t, e)
	return e
}

func openMySQL(t testing.TB) *env {
	t.Helper()
	admin, err := sql.Open("mysql", mysqlDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	space := "inbox_t_" + randomHex(6)
	if _, err := admin.Exec("CREATE DATABASE " + space); err != nil {
		t.Fatalf("create database on %s: %v (is MariaDB running? `make test` starts it)", mysqlDSN(), err)
	}
	t.Cleanup(func() {
		admin, err := sql.Open("mysql", mysqlDSN())
		if err != nil {
			t.Error(err)
			return
		}
		defer admin.Close()
		if _, err := admin.Exec("DROP DATABASE " + space); err != nil {
			t.Errorf("drop database %s: %v", space, err)
		}
	})
	db, err := sql.Open("mysql", mysqlDSN()+space)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(20)
	t.Cleanup(func() { _ = db.Close() })
	e := &env{
		db:        db,
		space:     space,
		effects:   space + ".effects",
		increment: "INSERT INTO effects (event_id, n) VALUES (?, 1) ON DUPLICATE KEY UPDATE n = n + 1",
		ago:       "UTC_TIMESTAMP(6) - INTERVAL %d HOUR",
		// information_schema.innodb_trx would say LOCK WAIT, but MariaDB
		// serves it from a cache that can stay stale for as long as a
		// test waits. An INSERT that has not finished is as good a sign:
		// unblocked, one takes microseconds.
		lockWaits: "SELECT count(*) FROM information_schema.processlist WHERE db = '" + space + "' AND info LIKE 'INSERT IGNORE%'",
	}
	mustExec(t, db, "CREATE TABLE effects (event_id VARBINARY(255) PRIMARY KEY, n INT NOT NULL)")
	// Unqualified: the connection's database is the test's.
	e.box = newInbox(t, inbox.Config{Dialect: inbox.MySQL})
	createTable(t, e)
	return e
}

func newInbox(t testing.TB, cfg inbox.Config) *inbox.Inbox {
	t.Helper()
	box, err := inbox.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return box
}

func createTable(t testing.TB, e *env) {
	t.Helper()
	if _, err := e.box.CreateTable(context.Background(), e.db); err != nil {
		t.Fatal(err)
	}
}

func mustExec(t testing.TB, db *sql.DB, query string, args ...any) int64 {
	t.Helper()
	res, err := db.Exec(query, args...)
	if err != nil {
		t.Fatalf("exec %q: %v", query, err)
	}
	n, _ := res.RowsAffected()
	return n
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// apply is the effect under test: it adds one to the event's count, so an
// event applied twice shows as 2.
func (e *env) apply(eventID string) func(tx *sql.Tx) error {
	return func(tx *sql.Tx) error {
		_, err := tx.Exec(e.increment, eventID)
		return err
	}
}

// effectCounts returns how many times each event's effect is stored.
func (e *env) effectCounts(t *testing.T) map[string]int {
	t.Helper()
	rows, err := e.db.Query("SELECT event_id, n FROM " + e.effects)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	counts := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		counts[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return counts
}

// records returns the inbox's (consumer, event id) pairs as "consumer/id".
func (e *env) records(t *testing.T) map[string]bool {
	t.Helper()
	rows, err := e.db.Query(fmt.Sprintf("SELECT consumer, event_id FROM %s.%s", e.space, "inbox"))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var c, id string
		if err := rows.Scan(&c, &id); err != nil {
			t.Fatal(err)
		}
		out[c+"/"+id] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func (e *env) waitingForLocks(t *testing.T) int {
	t.Helper()
	var n int
	if err := e.db.QueryRow(e.lockWaits).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
