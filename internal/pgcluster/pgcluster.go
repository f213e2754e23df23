// Package pgcluster starts a private, throwaway PostgreSQL cluster for
// tests that need what the shared server on 127.0.0.1:5432 cannot give
// them: server settings it does not have (wal_level=logical for logical
// replication) or a server they may stop, restart or kill.
//
// The cluster is built with the installed server binaries (initdb, pg_ctl,
// postgres) in a directory under /tmp named outbox-relay-pgcluster-*,
// listens on 127.0.0.1 at a free port with its Unix socket in its data
// directory, trusts every local connection, replication included, and is
// stopped and removed when the test ends. PostgreSQL refuses to run as
// root, so a test running as root runs the binaries as the postgres user.
package pgcluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

const (
	// dirPrefix names the directories clusters live in, so that those
	// of killed tests can be found and removed.
	dirPrefix = "outbox-relay-pgcluster-"
	// lockName is the file in a cluster's directory that the test
	// process holding the cluster keeps locked (flock) while it runs:
	// the kernel drops the lock when the process dies, however it dies.
	lockName = "lock"
	// logName is the server's log, in the data directory.
	logName = "server.log"
	// readyTimeout bounds the wait for a started server to accept
	// connections, and each pg_ctl command.
	readyTimeout = 30 * time.Second
	// pollInterval is how often readiness is checked.
	pollInterval = 50 * time.Millisecond
	// portAttempts is how many free ports Start tries when the one it
	// picked is taken before the server binds it.
	portAttempts = 3
	// staleAge is how old an unlocked directory must be before Start
	// removes it: a new one is unlocked for the moment between its
	// creation and its lock.
	staleAge = 10 * time.Second
	// logTailLines is how much of the server log a failure shows.
	logTailLines = 40
)

// Options configures a cluster.
type Options struct {
	// Settings are extra postgresql.conf lines, e.g.
	// "max_slot_wal_keep_size = '64MB'". They come after the package's
	// own settings, so they override them.
	Settings []string
}

// Cluster is a running (or stopped) private PostgreSQL server. Its methods
// fail the test they are given on error.
type Cluster struct {
	bin   string     // the server binaries' directory
	dir   string     // the cluster's directory under /tmp
	data  string     // the data directory, also the Unix socket directory
	owner *user.User // runs the binaries when the test runs as root; nil otherwise
	port  int
	lock  *os.File // flock'ed while the cluster is in use

	mu      sync.Mutex
	running bool
}

// Start initialises and starts a cluster with wal_level=logical,
// max_replication_slots=10, max_wal_senders=10, fsync=off, autovacuum=off,
// listening on 127.0.0.1 at a free port, with trust authentication for local
// and host (127.0.0.1/32) connections, replication connections included,
// plus opts.Settings. It registers t.Cleanup to stop the server (immediate
// mode) and remove its directory. It skips the test only when no PostgreSQL
// server binaries can be found; any other failure is fatal and shows the
// tail of the server log.
//
// Start first removes (best effort) the directories of clusters whose tests
// died without cleaning up, stopping their servers if they still run.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	return start(t, opts, freePort)
}

// start is Start with the function that picks a free port.
func start(t testing.TB, opts Options, pickPort func() (int, error)) *Cluster {
	t.Helper()
	bin, err := serverBinaries()
	if err != nil {
		t.Skipf("pgcluster: %v", err)
	}
	sweepOnce.Do(func() { sweep(baseDir(), staleAge) })

	c := &Cluster{bin: bin}
	if os.Geteuid() == 0 {
		// initdb and postgres refuse to run as root.
		if c.owner, err = user.Lookup("postgres"); err != nil {
			t.Fatalf("pgcluster: running as root needs the postgres user to run the server: %v", err)
		}
	}
	c.makeDir(t)

	out, err := c.command("initdb", "-D", c.data, "-U", "postgres", "-A", "trust",
		"-E", "UTF8", "--locale=C", "--no-sync").CombinedOutput()
	if err != nil {
		t.Fatalf("pgcluster: initdb: %v\n%s", err, out)
	}
	if err := c.writeHBA(); err != nil {
		t.Fatalf("pgcluster: %v", err)
	}
	conf := filepath.Join(c.data, "postgresql.conf")
	base, err := os.ReadFile(conf)
	if err != nil {
		t.Fatalf("pgcluster: %v", err)
	}
	for attempt := 1; ; attempt++ {
		if c.port, err = pickPort(); err != nil {
			t.Fatalf("pgcluster: %v", err)
		}
		if err := os.WriteFile(conf, append(base, c.settings(opts)...), 0o600); err != nil {
			t.Fatalf("pgcluster: %v", err)
		}
		logStart := c.logSize()
		err = c.pgCtl("start")
		if err == nil {
			break
		}
		// Another process may have bound the port between freePort
		// closing it and the server binding it.
		if attempt < portAttempts && strings.Contains(c.logSince(logStart), "Address already in use") {
			t.Logf("pgcluster: port %d was taken, trying another", c.port)
			continue
		}
		c.fatal(t, "pg_ctl start", err)
	}
	c.setRunning(true)
	c.waitReady(t)
	return c
}

// makeDir makes the cluster's locked directory, owned by the user the
// server runs as, and registers the cleanup that stops the server and
// removes it — before anything can fail, so that a failed start leaves
// nothing either.
func (c *Cluster) makeDir(t testing.TB) {
	t.Helper()
	var err error
	if c.dir, err = os.MkdirTemp(baseDir(), dirPrefix); err != nil {
		t.Fatalf("pgcluster: %v", err)
	}
	c.data = filepath.Join(c.dir, "data")
	t.Cleanup(c.cleanup)
	if c.lock, err = lockDir(c.dir); err != nil {
		t.Fatalf("pgcluster: %v", err)
	}
	if c.owner != nil {
		if err := chownAll(c.dir, c.owner); err != nil {
			t.Fatalf("pgcluster: %v", err)
		}
	}
}

// StartStandby makes a physical standby of c (pg_basebackup -R, streaming
// from c) on a free port of its own and starts it; it follows c until
// Promote. t.Cleanup stops it and removes its directory, as for Start.
func (c *Cluster) StartStandby(t testing.TB) *Cluster {
	t.Helper()
	s := &Cluster{bin: c.bin, owner: c.owner}
	s.makeDir(t)
	out, err := s.command("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(c.port), "-U", "postgres",
		"-D", s.data, "-R", "-X", "stream", "--no-sync", "--checkpoint=fast").CombinedOutput()
	if err != nil {
		t.Fatalf("pgcluster: pg_basebackup: %v\n%s", err, out)
	}
	if s.port, err = freePort(); err != nil {
		t.Fatalf("pgcluster: %v", err)
	}
	// The copied postgresql.conf names the primary's port and socket
	// directory; the last setting of a name wins.
	f, err := os.OpenFile(filepath.Join(s.data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("pgcluster: %v", err)
	}
	_, err = fmt.Fprintf(f, "\n# The standby's own.\nport = %d\nunix_socket_directories = '%s'\nhot_standby = on\n", s.port, s.data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("pgcluster: %v", err)
	}
	if err := s.pgCtl("start"); err != nil {
		s.fatal(t, "pg_ctl start (standby)", err)
	}
	s.setRunning(true)
	s.waitReady(t)
	return s
}

// Promote makes a standby the primary (pg_ctl promote) and waits until it
// accepts writes.
func (c *Cluster) Promote(t testing.TB) {
	t.Helper()
	if err := c.pgCtl("promote"); err != nil {
		c.fatal(t, "pg_ctl promote", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	for {
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		if err == nil {
			var inRecovery bool
			err = conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery)
			_ = conn.Close(context.Background())
			if err == nil && !inRecovery {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pgcluster: the standby did not leave recovery: %v", err)
		case <-time.After(pollInterval):
		}
	}
}

// Port is the port the server listens on.
func (c *Cluster) Port() int { return c.port }

// URL is the connection URL of database on the cluster, as the postgres
// superuser: postgres://postgres@127.0.0.1:PORT/database?sslmode=disable.
func (c *Cluster) URL(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, database)
}

// CreateDatabase creates a fresh, uniquely named database and returns its
// name. t.Cleanup drops it (WITH (FORCE), so open connections do not stop
// it) if the server is running then.
func (c *Cluster) CreateDatabase(t testing.TB) string {
	t.Helper()
	name := databaseName(t.Name())
	c.Exec(t, "postgres", "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	t.Cleanup(func() {
		if !c.isRunning() {
			return
		}
		if err := c.dropDatabase(name); err != nil {
			t.Errorf("pgcluster: dropping database %s: %v", name, err)
		}
	})
	return name
}

// dropDatabase drops name WITH (FORCE). A logical replication slot in use
// keeps a database from being dropped even so, and the walsender of a
// replication connection just closed may not have ended yet: that is
// retried for a while.
func (c *Cluster) dropDatabase(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	for {
		err := c.exec(ctx, "postgres", "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" { // object_in_use
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pollInterval):
		}
	}
}

// Restart restarts the server (pg_ctl restart -m fast), which ends every
// connection, and waits until it accepts connections again. The port and
// the data stay.
func (c *Cluster) Restart(t testing.TB) {
	t.Helper()
	c.setRunning(false)
	if err := c.pgCtl("restart", "-m", "fast"); err != nil {
		c.fatal(t, "pg_ctl restart", err)
	}
	c.setRunning(true)
	c.waitReady(t)
}

// Stop stops the server (pg_ctl stop -m fast), ending every connection.
func (c *Cluster) Stop(t testing.TB) {
	t.Helper()
	if err := c.pgCtl("stop", "-m", "fast"); err != nil {
		c.fatal(t, "pg_ctl stop", err)
	}
	c.setRunning(false)
}

// Crash stops the server as a crash would (pg_ctl stop -m immediate): no
// shutdown checkpoint, and no waiting for replication clients, which a
// clean shutdown does until they confirm everything sent.
func (c *Cluster) Crash(t testing.TB) {
	t.Helper()
	if err := c.pgCtl("stop", "-m", "immediate"); err != nil {
		c.fatal(t, "pg_ctl stop -m immediate", err)
	}
	c.setRunning(false)
}

// Start starts the server again after Stop, on the same port and with the
// same data, and waits until it accepts connections.
func (c *Cluster) Start(t testing.TB) {
	t.Helper()
	if err := c.pgCtl("start"); err != nil {
		c.fatal(t, "pg_ctl start", err)
	}
	c.setRunning(true)
	c.waitReady(t)
}

// Exec runs one SQL statement on database as the postgres superuser, over
// a connection of its own.
func (c *Cluster) Exec(t testing.TB, database, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := c.exec(ctx, database, sql, args...); err != nil {
		t.Fatalf("pgcluster: %s: %v", sql, err)
	}
}

func (c *Cluster) exec(ctx context.Context, database, sql string, args ...any) error {
	conn, err := pgx.Connect(ctx, c.URL(database))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql, args...)
	return err
}

// ServerCPU returns the user and system CPU time the server has used so
// far: its postmaster's own, that of every live child process (backends,
// walsenders, the background processes) and that of the children that have
// exited, which the postmaster reaps (cutime and cstime in /proc): a
// connection closed between two readings keeps its share, so the
// difference between two readings is what the whole server spent in
// between. Its resolution is the kernel's clock tick (10 ms) per process.
// It is zero when the server is not running.
func (c *Cluster) ServerCPU() time.Duration {
	var total time.Duration
	for _, d := range c.ServerCPUByKind() {
		total += d
	}
	return total
}

// ServerCPUByKind is ServerCPU split by the kind of process: "walsender",
// "backend" (client connections), the auxiliary processes by their names
// ("checkpointer", "walwriter", …) and "exited" for connections that
// closed (the postmaster's reaped children) and the postmaster itself.
func (c *Cluster) ServerCPUByKind() map[string]time.Duration {
	out := map[string]time.Duration{}
	pid := postmasterPID(c.data)
	if pid <= 0 || !isPostmasterOf(pid, c.data) {
		return out
	}
	f := statFields(pid)
	if len(f) < 15 {
		return out
	}
	out["exited"] = ticks(f[11]) + ticks(f[12]) + ticks(f[13]) + ticks(f[14])
	dirs, _ := os.ReadDir("/proc")
	parent := strconv.Itoa(pid)
	for _, d := range dirs {
		child, err := strconv.Atoi(d.Name())
		if err != nil || child == pid {
			continue
		}
		if f := statFields(child); len(f) >= 13 && f[1] == parent {
			out[processKind(child)] += ticks(f[11]) + ticks(f[12])
		}
	}
	return out
}

// processKind names a server process by its title ("postgres: walsender
// …", "postgres: checkpointer", "postgres: user db host …").
func processKind(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return "exited"
	}
	title := strings.TrimPrefix(strings.TrimRight(string(b), "\x00"), "postgres: ")
	for _, kind := range []string{"walsender", "checkpointer", "background writer", "walwriter", "autovacuum launcher",
		"logical replication launcher", "archiver", "stats collector"} {
		if strings.HasPrefix(title, kind) {
			return kind
		}
	}
	return "backend"
}

// statFields are the fields of /proc/pid/stat after the command name
// (which is in parentheses and may hold spaces): the state first, then
// ppid; utime, stime, cutime and cstime are at 11 to 14. Nil when the
// process is gone.
func statFields(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return nil
	}
	return strings.Fields(s[i+2:])
}

// ticks converts a /proc CPU time in clock ticks to a duration. Linux
// reports them in USER_HZ, 100 a second on every architecture Go runs on.
func ticks(field string) time.Duration {
	n, _ := strconv.ParseInt(field, 10, 64)
	return time.Duration(n) * 10 * time.Millisecond
}

// settings are the lines Start adds to postgresql.conf.
func (c *Cluster) settings(opts Options) []byte {
	var b bytes.Buffer
	b.WriteString("\n# Added by internal/pgcluster.\n")
	b.WriteString("listen_addresses = '127.0.0.1'\n")
	fmt.Fprintf(&b, "port = %d\n", c.port)
	fmt.Fprintf(&b, "unix_socket_directories = '%s'\n", c.data)
	b.WriteString("wal_level = logical\n")
	b.WriteString("max_replication_slots = 10\n")
	b.WriteString("max_wal_senders = 10\n")
	b.WriteString("fsync = off\n")
	b.WriteString("autovacuum = off\n")
	for _, s := range opts.Settings {
		b.WriteString(s + "\n")
	}
	return b.Bytes()
}

// writeHBA replaces initdb's pg_hba.conf: trust for the Unix socket and for
// 127.0.0.1, replication connections included, and nothing else.
func (c *Cluster) writeHBA() error {
	const hba = `# Written by internal/pgcluster: a throwaway test cluster.
local all         all                trust
local replication all                trust
host  all         all   127.0.0.1/32 trust
host  replication all   127.0.0.1/32 trust
`
	// The file exists (initdb wrote it), so it keeps its owner.
	return os.WriteFile(filepath.Join(c.data, "pg_hba.conf"), []byte(hba), 0o600)
}

// pgCtl runs pg_ctl action on the cluster, waiting for it to complete.
func (c *Cluster) pgCtl(action string, args ...string) error {
	// -l on every start: without it the postmaster would inherit pg_ctl's
	// output, and keep it open.
	all := []string{action, "-D", c.data, "-l", filepath.Join(c.data, logName),
		"-w", "-t", strconv.Itoa(int(readyTimeout / time.Second))}
	all = append(all, args...)
	out, err := c.command("pg_ctl", all...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v\n%s", err, bytes.TrimSpace(out))
	}
	return nil
}

// command runs one of the server binaries, as the postgres user when the
// test runs as root.
func (c *Cluster) command(name string, args ...string) *exec.Cmd {
	path := filepath.Join(c.bin, name)
	var cmd *exec.Cmd
	switch {
	case c.owner == nil:
		cmd = exec.Command(path, args...)
	case haveRunuser():
		cmd = exec.Command("runuser", append([]string{"-u", c.owner.Username, "--", path}, args...)...)
	default:
		cmd = exec.Command("su", c.owner.Username, "-s", "/bin/sh", "-c", shellQuote(append([]string{path}, args...)))
	}
	// The postgres user may not be able to enter the test's directory.
	cmd.Dir = c.dir
	// A server started in the background must not hold the test up if
	// it kept our output after all.
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// waitReady connects until the server accepts a connection, for at most
// readyTimeout.
func (c *Cluster) waitReady(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(readyTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		if err == nil {
			err = conn.Ping(ctx)
			conn.Close(context.Background())
		}
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.fatal(t, fmt.Sprintf("server on port %d did not accept connections within %s", c.port, readyTimeout), err)
		}
		time.Sleep(pollInterval)
	}
}

// fatal fails the test with err and the tail of the server log.
func (c *Cluster) fatal(t testing.TB, what string, err error) {
	t.Helper()
	t.Fatalf("pgcluster: %s: %v\n--- last %d lines of %s ---\n%s", what, err, logTailLines,
		filepath.Join(c.data, logName), c.logTail(logTailLines))
}

func (c *Cluster) logSize() int64 {
	fi, err := os.Stat(filepath.Join(c.data, logName))
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logSince is what the server logged after the log was offset bytes long.
func (c *Cluster) logSince(offset int64) string {
	b, _ := os.ReadFile(filepath.Join(c.data, logName))
	if offset > int64(len(b)) {
		offset = 0
	}
	return string(b[offset:])
}

func (c *Cluster) logTail(n int) string {
	b, err := os.ReadFile(filepath.Join(c.data, logName))
	if err != nil {
		return fmt.Sprintf("(no server log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (c *Cluster) setRunning(v bool) {
	c.mu.Lock()
	c.running = v
	c.mu.Unlock()
}

func (c *Cluster) isRunning() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running
}

// cleanup stops the server, whatever state it is in, and removes the
// cluster's directory.
func (c *Cluster) cleanup() {
	if c.data != "" {
		if _, err := os.Stat(filepath.Join(c.data, "postmaster.pid")); err == nil {
			_ = c.pgCtl("stop", "-m", "immediate")
		}
		// pg_ctl may have failed or given up: make sure.
		killPostmaster(c.data)
		c.setRunning(false)
	}
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
	}
	if c.lock != nil {
		_ = c.lock.Close()
	}
}

// databaseName is a new database's name: the test's name, made an
// identifier, and random hex so that it is unique.
func databaseName(testName string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(testName) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
		if b.Len() >= 40 {
			break
		}
	}
	random := make([]byte, 6)
	_, _ = rand.Read(random)
	return "t_" + b.String() + "_" + hex.EncodeToString(random)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// baseDir is where cluster directories go. As root the postgres user must
// be able to enter it, which a TMPDIR under /root would not let it: /tmp.
func baseDir() string {
	if os.Geteuid() == 0 {
		return "/tmp"
	}
	return os.TempDir()
}

// lockDir creates dir's lock file and holds an exclusive lock on it until
// the file is closed or the process ends.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", f.Name(), err)
	}
	return f, nil
}

func chownAll(dir string, u *user.User) error {
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return err
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return err
	}
	return filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
}

var (
	runuserOnce sync.Once
	runuserOK   bool
)

func haveRunuser() bool {
	runuserOnce.Do(func() {
		_, err := exec.LookPath("runuser")
		runuserOK = err == nil
	})
	return runuserOK
}

// shellQuote joins args into a /bin/sh command line.
func shellQuote(args []string) string {
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(quoted, " ")
}

// Finding the server binaries.

var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

// serverBinaries is the directory of the PostgreSQL server binaries: pg_config
// --bindir's, else the highest /usr/lib/postgresql/*/bin, else initdb's on
// PATH, preferring PostgreSQL 15 or later to the order.
func serverBinaries() (string, error) {
	binOnce.Do(func() { binDir, binErr = findServerBinaries() })
	return binDir, binErr
}

func findServerBinaries() (string, error) {
	var candidates []string
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		candidates = append(candidates, strings.TrimSpace(string(out)))
	}
	versioned, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(versioned, func(i, j int) bool {
		return dirVersion(versioned[i]) > dirVersion(versioned[j])
	})
	candidates = append(candidates, versioned...)
	if p, err := exec.LookPath("initdb"); err == nil {
		if p, err = filepath.EvalSymlinks(p); err == nil {
			candidates = append(candidates, filepath.Dir(p))
		}
	}

	var usable []string
	for _, dir := range candidates {
		if hasServer(dir) {
			usable = append(usable, dir)
		}
	}
	if len(usable) == 0 {
		return "", errors.New("no PostgreSQL server binaries (initdb, pg_ctl, postgres) in pg_config --bindir, " +
			"/usr/lib/postgresql/*/bin or on PATH; scripts/services.sh postgres installs them")
	}
	for _, dir := range usable {
		if majorVersion(dir) >= 15 {
			return dir, nil
		}
	}
	return usable[0], nil
}

func hasServer(dir string) bool {
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// dirVersion is N of /usr/lib/postgresql/N/bin.
func dirVersion(bin string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(bin)), 64)
	return v
}

var versionRE = regexp.MustCompile(`\(PostgreSQL\) (\d+)`)

// majorVersion is the major version of the server binaries in dir, 0 if it
// cannot be told.
func majorVersion(dir string) int {
	out, err := exec.Command(filepath.Join(dir, "pg_ctl"), "--version").Output()
	if err != nil {
		return 0
	}
	m := versionRE.FindSubmatch(out)
	if m == nil {
		return 0
	}
	v, _ := strconv.Atoi(string(m[1]))
	return v
}

// Removing what killed tests left.

var sweepOnce sync.Once

// sweep removes, best effort, the cluster directories under base that no
// live test process holds, stopping their servers first if they still run.
func sweep(base string, minAge time.Duration) {
	dirs, _ := filepath.Glob(filepath.Join(base, dirPrefix+"*"))
	for _, dir := range dirs {
		sweepDir(dir, minAge)
	}
}

// sweepDir removes dir if it is at least minAge old and its lock is free,
// that is if the test process that made it has ended without removing it.
// A server still running in it is stopped: nothing else would ever stop
// it.
func sweepDir(dir string, minAge time.Duration) {
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() {
		return
	}
	lockPath := filepath.Join(dir, lockName)
	if lfi, err := os.Stat(lockPath); err == nil {
		fi = lfi
	} else if !errors.Is(err, fs.ErrNotExist) {
		return // not ours to look into
	}
	if time.Since(fi.ModTime()) < minAge {
		return // may be in the making
	}
	if f, err := os.Open(lockPath); err == nil {
		defer f.Close()
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			return // held: its test is running
		}
	}
	killPostmaster(filepath.Join(dir, "data"))
	_ = os.RemoveAll(dir)
}

// killPostmaster stops the postmaster of data if one still runs: SIGQUIT
// (immediate shutdown), then SIGKILL. It signals only a process that is
// the postmaster of that data directory by its command line.
func killPostmaster(data string) {
	pid := postmasterPID(data)
	if pid <= 0 || !isPostmasterOf(pid, data) {
		return
	}
	for _, sig := range []syscall.Signal{syscall.SIGQUIT, syscall.SIGKILL} {
		if syscall.Kill(pid, sig) != nil {
			return // gone, or not ours to signal
		}
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if !alive(pid) {
				return
			}
			time.Sleep(pollInterval)
		}
	}
}

// postmasterPID is the pid in data's postmaster.pid, 0 if there is none.
func postmasterPID(data string) int {
	b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return 0
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(first))
	return pid
}

// isPostmasterOf tells whether pid is a postgres process started on data
// (pg_ctl passes it -D data), so that a recycled pid is never signalled.
func isPostmasterOf(pid int, data string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	if len(args) == 0 || filepath.Base(args[0]) != "postgres" {
		return false
	}
	for i, a := range args {
		if (a == "-D" && i+1 < len(args) && args[i+1] == data) || a == "-D"+data {
			return true
		}
	}
	return false
}

// alive tells whether pid runs: a zombie (which a container's init may
// never reap) does not.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}
