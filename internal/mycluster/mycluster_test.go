package mycluster

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// query returns the first column of the first row of q, as root over a
// connection of its own, with database as the default database.
func query(t *testing.T, c *Cluster, database, q string, args ...any) string {
	t.Helper()
	db, err := sql.Open("mysql", c.DSN(database))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var s string
	if err := db.QueryRowContext(ctx, q, args...).Scan(&s); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return s
}

func run(t *testing.T, c *Cluster, database, q string, args ...any) {
	t.Helper()
	db, err := sql.Open("mysql", c.DSN(database))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// pid is the running server's pid, failing the test when there is none.
func pid(t *testing.T, c *Cluster) int {
	t.Helper()
	p, _ := c.running()
	if p == nil {
		t.Fatal("the server is not running")
	}
	return p.Pid
}

// refused tells whether a connection to c fails, as it must while c is
// down.
func refused(c *Cluster) bool {
	return c.ping() != nil
}

func TestStartHasTheRowBinlogOn(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := Start(t, Options{})
	t.Logf("Start took %s", time.Since(start).Round(time.Millisecond))

	for variable, want := range map[string]string{
		"log_bin":                        "1",
		"binlog_format":                  "ROW",
		"binlog_row_image":               "FULL",
		"port":                           strconv.Itoa(c.Port()),
		"bind_address":                   "127.0.0.1",
		"server_id":                      strconv.Itoa(c.ServerID()),
		"skip_name_resolve":              "1",
		"performance_schema":             "0",
		"innodb_flush_log_at_trx_commit": "2",
		"sync_binlog":                    "0",
		"character_set_server":           "utf8mb4",
	} {
		if got := query(t, c, "", "SELECT @@"+variable); got != want {
			t.Errorf("@@%s = %q, want %q", variable, got, want)
		}
	}
	if c.ServerID() == 0 {
		t.Error("server_id is 0, which a binlog client cannot tell from its own")
	}
	if got := query(t, c, "", "SELECT CURRENT_USER()"); got != "root@127.0.0.1" && got != "root@localhost" {
		t.Errorf("logged in over TCP as %s, want root", got)
	}
	if want := "mysql://root@127.0.0.1:" + strconv.Itoa(c.Port()) + "/d"; c.URL("d") != want {
		t.Errorf("URL(d) = %s, want %s", c.URL("d"), want)
	}

	var db string
	t.Run("database", func(t *testing.T) {
		db = c.CreateDatabase(t)
		run(t, c, db, "CREATE TABLE logged (id int PRIMARY KEY, v text)")
		run(t, c, db, "INSERT INTO logged VALUES (1, 'row')")
		// The insert is in the binary log as a row event.
		admin := c.DB(t)
		rows, err := admin.Query("SHOW BINLOG EVENTS")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		cols, _ := rows.Columns()
		var writeRows bool
		for rows.Next() {
			vals := make([]sql.RawBytes, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			if string(vals[2]) == "Write_rows_v1" {
				writeRows = true
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if !writeRows {
			t.Error("no Write_rows event in the binary log after an insert")
		}
	})
	// The subtest's cleanup dropped its database.
	if n := query(t, c, "", "SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = ?", db); n != "0" {
		t.Errorf("database %s still there after its test", db)
	}
}

func TestArgsOverride(t *testing.T) {
	t.Parallel()
	c := Start(t, Options{Args: []string{"--binlog-format=STATEMENT", "--server-id=7"}})
	if got := query(t, c, "", "SELECT @@binlog_format"); got != "STATEMENT" {
		t.Errorf("binlog_format = %s, want STATEMENT", got)
	}
	if c.ServerID() != 7 {
		t.Errorf("ServerID() = %d, want 7", c.ServerID())
	}
	if got := query(t, c, "", "SELECT @@log_bin"); got != "1" {
		t.Errorf("log_bin = %s, want 1", got)
	}
}

func TestRestartKeepsData(t *testing.T) {
	t.Parallel()
	c := Start(t, Options{Args: []string{"--server-id=9"}})
	db := c.CreateDatabase(t)
	run(t, c, db, "CREATE TABLE kept (v text)")
	run(t, c, db, "INSERT INTO kept VALUES (?)", "before restart")

	pool, err := sql.Open("mysql", c.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	old, err := pool.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()

	port, before := c.Port(), pid(t, c)
	c.Restart(t)
	if c.Port() != port {
		t.Errorf("port changed from %d to %d", port, c.Port())
	}
	if after := pid(t, c); after == before {
		t.Errorf("the same server process (%d) after Restart", after)
	}
	if err := old.PingContext(context.Background()); err == nil {
		t.Error("a connection from before the restart still works")
	}
	if got := query(t, c, db, "SELECT v FROM kept"); got != "before restart" {
		t.Errorf("after restart: %q", got)
	}
	if got := query(t, c, "", "SELECT @@server_id"); got != "9" || c.ServerID() != 9 {
		t.Errorf("after restart server_id = %s, ServerID() = %d, want 9 (the options stay)", got, c.ServerID())
	}
}

func TestKillThenStartRecovers(t *testing.T) {
	t.Parallel()
	c := Start(t, Options{})
	db := c.CreateDatabase(t)
	run(t, c, db, "CREATE TABLE committed (n int PRIMARY KEY) ENGINE=InnoDB")
	for n := range 20 {
		run(t, c, db, "INSERT INTO committed VALUES (?)", n)
	}
	file := query(t, c, "", "SELECT @@log_bin_basename")

	killed := pid(t, c)
	c.Kill(t)
	if alive(killed) {
		t.Fatalf("server %d still running after Kill", killed)
	}
	if !refused(c) {
		t.Fatal("connected to a killed server")
	}

	c.Start(t)
	if got := query(t, c, db, "SELECT COUNT(*) FROM committed"); got != "20" {
		t.Errorf("%s committed rows after the crash, want 20", got)
	}
	run(t, c, db, "INSERT INTO committed VALUES (20)")
	if got := query(t, c, "", "SELECT @@log_bin_basename"); got != file {
		t.Errorf("binlog basename %s after the crash, was %s", got, file)
	}
	if !errorLogSays(t, c, "crash recovery") {
		t.Error("the error log tells of no crash recovery after Kill")
	}
}

// errorLogSays tells whether the server's error log mentions s (in any case).
func errorLogSays(t *testing.T, c *Cluster, s string) bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.dir, logName))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(strings.ToLower(string(b)), strings.ToLower(s))
}

func TestStopThenStartAndCleanup(t *testing.T) {
	t.Parallel()
	var dir, data string
	var last int
	t.Run("server", func(t *testing.T) {
		c := Start(t, Options{})
		dir, data = c.dir, c.data
		run(t, c, "mysql", "CREATE TABLE test_kept (v int)")
		run(t, c, "mysql", "INSERT INTO test_kept VALUES (42)")

		stopped := pid(t, c)
		c.Stop(t)
		if alive(stopped) {
			t.Fatalf("server %d still running after Stop", stopped)
		}
		if !refused(c) {
			t.Fatal("connected to a stopped server")
		}
		if errorLogSays(t, c, "crash recovery") {
			t.Error("a clean shutdown needed crash recovery")
		}

		c.Start(t)
		if got := query(t, c, "mysql", "SELECT v FROM test_kept"); got != "42" {
			t.Errorf("after stop and start: %q", got)
		}
		last = pid(t, c)
		if pids := serversOf(c.data); len(pids) != 1 || pids[0] != last {
			t.Fatalf("servers on %s: %v, want [%d]", c.data, pids, last)
		}
	})
	// Cleanup killed the server and removed everything.
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s still there after cleanup (%v)", dir, err)
	}
	if alive(last) {
		t.Errorf("server %d still running after cleanup", last)
	}
	if pids := serversOf(data); len(pids) != 0 {
		t.Errorf("servers %v still running on %s after cleanup", pids, data)
	}
}

func TestTwoClustersAtOnce(t *testing.T) {
	t.Parallel()
	a := Start(t, Options{})
	b := Start(t, Options{})
	if a.Port() == b.Port() {
		t.Fatalf("both servers on port %d", a.Port())
	}
	if a.dir == b.dir {
		t.Fatalf("both servers in %s", a.dir)
	}
	if a.ServerID() == b.ServerID() {
		t.Errorf("both servers have server_id %d", a.ServerID())
	}
	db := a.CreateDatabase(t)
	const q = "SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = ?"
	if got := query(t, b, "", q, db); got != "0" {
		t.Error("a database made on server a is on server b")
	}
	if got := query(t, a, "", q, db); got != "1" {
		t.Error("a database made on server a is not on it")
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
	if c.Port() == takenPort || calls != 2 {
		t.Errorf("port %d after %d picks; the first, %d, was taken", c.Port(), calls, takenPort)
	}
	if got := query(t, c, "", "SELECT @@port"); got != strconv.Itoa(c.Port()) {
		t.Errorf("@@port = %s, want %d", got, c.Port())
	}
	if pids := serversOf(c.data); len(pids) != 1 {
		t.Errorf("servers on %s: %v, want one (the one that failed to bind must be gone)", c.data, pids)
	}
}

func TestSweepKillsOrphansAndRemovesTheirDirectories(t *testing.T) {
	t.Parallel()
	// A server whose test process died: its lock is free, its server
	// runs.
	c := Start(t, Options{})
	orphan := pid(t, c)
	c.lock.Close()
	c.lock = nil
	sweepDir(c.dir, 0)
	if _, err := os.Stat(c.dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("orphan %s still there (%v)", c.dir, err)
	}
	if alive(orphan) {
		t.Errorf("orphan server %d still running", orphan)
	}
	// For cleanup, which must cope with nothing left.
	c.killAndWait()

	// A killed test's directory whose server is gone.
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
	long := databaseName(string(make([]byte, 200)))
	if len(long) > 64 {
		t.Errorf("%s is longer than a database name may be", long)
	}
}

func TestDSN(t *testing.T) {
	t.Parallel()
	c := &Cluster{port: 3307}
	if got, want := c.DSN("d"), "root@tcp(127.0.0.1:3307)/d?parseTime=true"; got != want {
		t.Errorf("DSN(d) = %s, want %s", got, want)
	}
}
