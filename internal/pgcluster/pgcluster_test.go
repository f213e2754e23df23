package pgcluster

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/outbox-relay/relay/internal/eventually"
)

// query returns the first column of the first row of sql on database.
func query(t *testing.T, c *Cluster, database, sql string, args ...any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL(database))
	if err != nil {
		t.Fatalf("connecting to %s: %v", database, err)
	}
	defer conn.Close(context.Background())
	var s string
	if err := conn.QueryRow(ctx, sql, args...).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}

func TestStartIsLogicalAndTrustsReplication(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := Start(t, Options{Settings: []string{"max_slot_wal_keep_size = '64MB'"}})
	t.Logf("Start took %s", time.Since(start).Round(time.Millisecond))

	for setting, want := range map[string]string{
		"wal_level":               "logical",
		"max_replication_slots":   "10",
		"max_wal_senders":         "10",
		"fsync":                   "off",
		"autovacuum":              "off",
		"listen_addresses":        "127.0.0.1",
		"port":                    strconv.Itoa(c.port),
		"unix_socket_directories": c.data,
		"max_slot_wal_keep_size":  "64MB",
	} {
		if got := query(t, c, "postgres", "SHOW "+setting); got != want {
			t.Errorf("SHOW %s = %q, want %q", setting, got, want)
		}
	}

	var db string
	t.Run("database", func(t *testing.T) {
		db = c.CreateDatabase(t)
		c.Exec(t, db, "SELECT pg_create_logical_replication_slot('s', 'pgoutput')")
		if got := query(t, c, db, "SELECT plugin FROM pg_replication_slots WHERE slot_name = 's'"); got != "pgoutput" {
			t.Errorf("slot s's plugin = %q, want pgoutput", got)
		}

		// A replication connection over TCP, as a logical
		// replication client makes it.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgconn.Connect(ctx, c.URL(db)+"&replication=database")
		if err != nil {
			t.Fatalf("replication connection: %v", err)
		}
		defer func() { _ = conn.Close(context.Background()) }()
		results, err := conn.Exec(ctx, "IDENTIFY_SYSTEM").ReadAll()
		if err != nil {
			t.Fatalf("IDENTIFY_SYSTEM: %v", err)
		}
		if len(results) != 1 || len(results[0].Rows) != 1 {
			t.Fatalf("IDENTIFY_SYSTEM returned %v", results)
		}
	})
	// The subtest's cleanup dropped its database, slot and all.
	if n := query(t, c, "postgres", "SELECT count(*)::text FROM pg_database WHERE datname = $1", db); n != "0" {
		t.Errorf("database %s still there after its test", db)
	}
	if n := query(t, c, "postgres", "SELECT count(*)::text FROM pg_replication_slots"); n != "0" {
		t.Errorf("%s replication slots left after the database's test", n)
	}
}

func TestRestartKeepsData(t *testing.T) {
	t.Parallel()
	c := Start(t, Options{})
	db := c.CreateDatabase(t)
	c.Exec(t, db, "CREATE TABLE kept (v text)")
	c.Exec(t, db, "INSERT INTO kept VALUES ($1)", "before restart")

	ctx := context.Background()
	old, err := pgx.Connect(ctx, c.URL(db))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close(ctx)

	port := c.port
	c.Restart(t)
	if c.port != port {
		t.Errorf("port changed from %d to %d", port, c.port)
	}
	if err := old.Ping(ctx); err == nil {
		t.Error("a connection from before the restart still works")
	}
	if got := query(t, c, db, "SELECT v FROM kept"); got != "before restart" {
		t.Errorf("after restart: %q", got)
	}
	if got := query(t, c, db, "SHOW wal_level"); got != "logical" {
		t.Errorf("wal_level after restart = %q", got)
	}
}

func TestStopThenStartAndCleanup(t *testing.T) {
	t.Parallel()
	var dir string
	var pid int
	t.Run("cluster", func(t *testing.T) {
		c := Start(t, Options{})
		dir = c.dir
		c.Exec(t, "postgres", "CREATE TABLE kept (v int)")
		c.Exec(t, "postgres", "INSERT INTO kept VALUES (42)")

		c.Stop(t)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if conn, err := pgx.Connect(ctx, c.URL("postgres")); err == nil {
			conn.Close(ctx)
			t.Fatal("connected to a stopped server")
		}

		c.Start(t)
		if got := query(t, c, "postgres", "SELECT v::text FROM kept"); got != "42" {
			t.Errorf("after stop and start: %q", got)
		}
		if pid = postmasterPID(c.data); pid <= 0 || !isPostmasterOf(pid, c.data) {
			t.Fatalf("no postmaster found for %s (pid %d)", c.data, pid)
		}
	})
	// Cleanup stopped the server and removed everything.
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s still there after cleanup (%v)", dir, err)
	}
	if pid > 0 && alive(pid) {
		t.Errorf("postmaster %d still running after cleanup", pid)
	}
}

func TestTwoClustersAtOnce(t *testing.T) {
	t.Parallel()
	a := Start(t, Options{})
	b := Start(t, Options{})
	if a.port == b.port {
		t.Fatalf("both clusters on port %d", a.port)
	}
	if a.dir == b.dir {
		t.Fatalf("both clusters in %s", a.dir)
	}
	a.Exec(t, "postgres", "CREATE TABLE only_in_a ()")
	if got := query(t, b, "postgres", "SELECT count(*)::text FROM pg_class WHERE relname = 'only_in_a'"); got != "0" {
		t.Error("a table made in cluster a is in cluster b")
	}
	if got := query(t, a, "postgres", "SELECT count(*)::text FROM pg_class WHERE relname = 'only_in_a'"); got != "1" {
		t.Error("a table made in cluster a is not in it")
	}
}

func TestStartRetriesATakenPort(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	takenPort := taken.Addr().(*net.TCPAddr).Port
	calls := 0
	c := start(t, Options{}, func() (int, error) {
		calls++
		if calls == 1 {
			return takenPort, nil
		}
		return freePort()
	})
	if c.port == takenPort || calls != 2 {
		t.Errorf("port %d after %d picks; the first, %d, was taken", c.port, calls, takenPort)
	}
	if got := query(t, c, "postgres", "SHOW port"); got != strconv.Itoa(c.port) {
		t.Errorf("SHOW port = %s, want %d", got, c.port)
	}
}

func TestSweepStopsOrphansAndRemovesTheirDirectories(t *testing.T) {
	t.Parallel()
	// A cluster whose test process died: its lock is free, its server
	// runs.
	c := Start(t, Options{})
	pid := postmasterPID(c.data)
	if pid <= 0 || !isPostmasterOf(pid, c.data) {
		t.Fatalf("no postmaster found for %s (pid %d)", c.data, pid)
	}
	c.lock.Close()
	c.lock = nil
	sweepDir(c.dir, 0)
	if _, err := os.Stat(c.dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("orphan %s still there (%v)", c.dir, err)
	}
	if alive(pid) {
		t.Errorf("orphan's postmaster %d still running", pid)
	}
	c.setRunning(false) // for cleanup, which must cope with nothing left

	// A killed test's directory whose server is gone, with a postmaster.pid
	// that names a process that is not its postmaster (this one).
	dead, err := os.MkdirTemp(baseDir(), dirPrefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dead) })
	lock, err := lockDir(dead)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dead, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dead, "data", "postmaster.pid"), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// Held by a live test: left alone, whatever its age.
	sweepDir(dead, 0)
	if _, err := os.Stat(dead); err != nil {
		t.Fatalf("swept a directory whose lock is held: %v", err)
	}
	lock.Close()
	// Too new: may be in the making.
	sweepDir(dead, time.Hour)
	if _, err := os.Stat(dead); err != nil {
		t.Fatalf("swept a directory younger than the minimum age: %v", err)
	}
	sweepDir(dead, 0)
	if _, err := os.Stat(dead); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stale %s still there (%v)", dead, err)
	}
}

func TestDatabaseName(t *testing.T) {
	t.Parallel()
	a, b := databaseName("TestX/sub-test with spaces"), databaseName("TestX/sub-test with spaces")
	if a == b {
		t.Errorf("two databases named %s", a)
	}
	if len(a) > 63 {
		t.Errorf("%s is longer than an identifier may be", a)
	}
	long := databaseName(string(make([]byte, 200)))
	if len(long) > 63 {
		t.Errorf("%s is longer than an identifier may be", long)
	}
}

// A standby follows its primary and, promoted after the primary crashed,
// takes writes.
func TestStandbyFollowsThenIsPromoted(t *testing.T) {
	t.Parallel()
	p := Start(t, Options{})
	p.Exec(t, "postgres", "CREATE TABLE followed (n int)")
	s := p.StartStandby(t)
	p.Exec(t, "postgres", "INSERT INTO followed VALUES (1)")
	eventually.True(t, 30*time.Second, func() bool {
		conn, err := pgx.Connect(context.Background(), s.URL("postgres"))
		if err != nil {
			return false
		}
		defer conn.Close(context.Background())
		var n int
		return conn.QueryRow(context.Background(), "SELECT count(*) FROM followed").Scan(&n) == nil && n == 1
	}, func() string { return "the standby to replay the insert" })
	p.Crash(t)
	s.Promote(t)
	s.Exec(t, "postgres", "INSERT INTO followed VALUES (2)")
}
