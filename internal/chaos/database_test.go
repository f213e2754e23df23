package chaos

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/mysqltest"
	"github.com/outbox-relay/relay/internal/harness/natstest"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/postgres"
)

// TestDatabaseConnectionsTerminatedMidDrain kills every connection the relay
// holds, three times during a drain: the relay must keep running,
// reconnect, and lose nothing.
func TestDatabaseConnectionsTerminatedMidDrain(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	srv := natstest.Start(t)
	st := srv.Stream(t, jetstream.StreamConfig{Name: "TERMINATED", Subjects: []string{"terminated.>"}, Duplicates: 10 * time.Minute})
	const n = 30_000
	tb.InsertN(t, n, "terminated.event")

	app := "chaos-" + randomHex(4)
	p := startRelay(t, "STORAGE_URL="+pgtest.URL()+"&application_name="+app, "STORAGE_TABLE_NAME="+tb.Name,
		"PUBLISHER_URL="+srv.URL(), "BATCH_SIZE=200")
	for round := 1; round <= 3; round++ {
		target := round * n / 5
		eventually.True(t, 30*time.Second, func() bool { return tb.Counts(t)[outbox.StatusDelivered] >= target },
			func() string { return fmt.Sprintf("%d delivered; log:\n%s", target, tail(p.Log(), 3000)) })
		killed := tb.Exec(t, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", app)
		if killed == 0 {
			t.Fatalf("round %d: the relay held no connection to terminate", round)
		}
		p.requireRunning(t)
	}
	waitFor(t, tb, time.Minute, map[outbox.Status]int{outbox.StatusDelivered: n}, p)
	p.requireRunning(t)
	p.stop(t)
	if got := natstest.Count(t, st); got != n {
		t.Fatalf("stream holds %d messages, want %d", got, n)
	}
}

// TestMySQLConnectionsKilledMidDrain kills every connection the relay holds
// to MySQL (KILL CONNECTION), three times during a drain: the relay must
// keep running, reconnect, and lose nothing. The relay logs in as a user of
// its own, so that its connections can be told from the test's.
func TestMySQLConnectionsKilledMidDrain(t *testing.T) {
	t.Parallel()
	tb := mysqltest.New(t)
	srv := natstest.Start(t)
	st := srv.Stream(t, jetstream.StreamConfig{Name: "KILLED", Subjects: []string{"killed.>"}, Duplicates: 10 * time.Minute})
	const n = 30_000
	tb.InsertN(t, n, "killed.event")
	relayURL := tb.UserURL(t, "chaos-"+randomHex(4))
	u, err := url.Parse(relayURL)
	if err != nil {
		t.Fatal(err)
	}
	admin := mysqltest.Admin(t)

	p := startRelay(t, "STORAGE_URL="+relayURL, "PUBLISHER_URL="+srv.URL(), "BATCH_SIZE=200")
	for round := 1; round <= 3; round++ {
		target := round * n / 5
		eventually.True(t, 30*time.Second, func() bool { return tb.Counts(t)[outbox.StatusDelivered] >= target },
			func() string { return fmt.Sprintf("%d delivered; log:\n%s", target, tail(p.Log(), 3000)) })
		if killed := killConnections(t, admin, u.User.Username()); killed == 0 {
			t.Fatalf("round %d: the relay held no connection to kill", round)
		}
		p.requireRunning(t)
	}
	waitFor(t, tb, time.Minute, map[outbox.Status]int{outbox.StatusDelivered: n}, p)
	p.requireRunning(t)
	p.stop(t)
	if got := natstest.Count(t, st); got != n {
		t.Fatalf("stream holds %d messages, want %d", got, n)
	}
}

// killConnections kills every connection of user and returns how many it
// killed.
func killConnections(t *testing.T, admin *sql.DB, user string) int {
	t.Helper()
	ctx := context.Background()
	rows, err := admin.QueryContext(ctx, "SELECT id FROM information_schema.processlist WHERE user = ?", user)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	killed := 0
	for _, id := range ids {
		// A connection may have ended on its own meanwhile.
		if _, err := admin.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id)); err == nil {
			killed++
		}
	}
	return killed
}

// TestPostgresRestartMidDrain restarts the database server under a
// draining relay. It runs its own PostgreSQL cluster so that the restart
// disturbs no other test.
func TestPostgresRestartMidDrain(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	store, err := postgres.Open(context.Background(), c.url+"&table=openoutbox_events")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if _, err := store.Migrate(context.Background(), storage.MigrateOptions{}); err != nil {
		t.Fatal(err)
	}
	tb := pgtest.Of(t, store, c.url, "openoutbox_events")
	srv := natstest.Start(t)
	st := srv.Stream(t, jetstream.StreamConfig{Name: "RESTART", Subjects: []string{"restart.>"}, Duplicates: 10 * time.Minute})
	const n = 30_000
	tb.InsertN(t, n, "restart.event")

	p := startRelay(t, "STORAGE_URL="+c.url, "PUBLISHER_URL="+srv.URL(), "BATCH_SIZE=200")
	eventually.True(t, 30*time.Second, func() bool { return tb.Counts(t)[outbox.StatusDelivered] >= n/5 },
		func() string { return "first deliveries; log:\n" + tail(p.Log(), 3000) })
	c.restart(t)
	p.requireRunning(t)

	// The test's own pool reconnects too; its first query may meet a dead
	// connection, so read counts forgivingly until the server is back.
	var got map[outbox.Status]int
	eventually.True(t, 2*time.Minute, func() bool {
		got = countsOrNil(store)
		return got != nil && got[outbox.StatusDelivered] == n && len(got) == 1
	}, func() string { return "all delivered, counts " + fmtCounts(got) + "; log:\n" + tail(p.Log(), 3000) })
	p.requireRunning(t)
	p.stop(t)
	if got := natstest.Count(t, st); got != n {
		t.Fatalf("stream holds %d messages, want %d", got, n)
	}
}

func countsOrNil(store *postgres.Store) map[outbox.Status]int {
	db, _ := store.SQL()
	rows, err := db.QueryContext(context.Background(), "SELECT status, count(*) FROM openoutbox_events GROUP BY status")
	if err != nil {
		return nil
	}
	defer rows.Close()
	counts := map[outbox.Status]int{}
	for rows.Next() {
		var s string
		var n int
		if rows.Scan(&s, &n) != nil {
			return nil
		}
		counts[outbox.Status(s)] = n
	}
	if rows.Err() != nil {
		return nil
	}
	return counts
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// cluster is a PostgreSQL server of the test's own, from the installed
// PostgreSQL binaries.
type cluster struct {
	bin, dir string
	owner    *user.User // runs the server when the test runs as root
	url      string
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(bins) == 0 {
		t.Fatal("no PostgreSQL server binaries in /usr/lib/postgresql/*/bin; `make test` installs the postgresql package")
	}
	sort.Strings(bins)
	c := &cluster{bin: filepath.Dir(bins[len(bins)-1])}
	dir, err := os.MkdirTemp("", "chaos-pg-")
	if err != nil {
		t.Fatal(err)
	}
	c.dir = dir
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if os.Geteuid() == 0 {
		// PostgreSQL refuses to run as root.
		if c.owner, err = user.Lookup("postgres"); err != nil {
			t.Fatalf("running as root needs the postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(c.owner.Uid)
		gid, _ := strconv.Atoi(c.owner.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	c.run(t, "initdb", "-D", dir+"/data", "-U", "postgres", "-A", "trust", "--no-sync")
	port := freePort(t)
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off", port, dir)
	c.run(t, "pg_ctl", "-D", dir+"/data", "-o", opts, "-l", dir+"/server.log", "-w", "start")
	t.Cleanup(func() {
		_ = c.command("pg_ctl", "-D", dir+"/data", "-m", "immediate", "-w", "stop").Run()
	})
	c.url = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	return c
}

// restart stops the server, dropping every connection, and starts it again.
func (c *cluster) restart(t *testing.T) {
	t.Helper()
	// -l again: without it the new server would inherit pg_ctl's output
	// and keep it open.
	c.run(t, "pg_ctl", "-D", c.dir+"/data", "-l", c.dir+"/server.log", "-m", "fast", "-w", "restart")
}

func (c *cluster) command(name string, args ...string) *exec.Cmd {
	path := filepath.Join(c.bin, name)
	var cmd *exec.Cmd
	if c.owner != nil {
		cmd = exec.Command("runuser", append([]string{"-u", c.owner.Username, "--", path}, args...)...)
	} else {
		cmd = exec.Command(path, args...)
	}
	// A server started in the background must not hold the test up.
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

func (c *cluster) run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := c.command(name, args...).CombinedOutput(); err != nil {
		log, _ := os.ReadFile(c.dir + "/server.log")
		t.Fatalf("%s: %v\n%s\n%s", name, err, out, log)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
