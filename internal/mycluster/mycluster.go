// Package mycluster starts a private, throwaway MariaDB server for tests
// that need what the shared server on 127.0.0.1:3306 cannot give them:
// the binary log on (row-based, full row images, as a binlog reader needs
// it), other binlog settings, or a server they may stop, restart, kill or
// purge the logs of.
//
// The server is built with the installed binaries (mariadb-install-db,
// mariadbd) in a directory under /var/tmp named outbox-relay-mycluster-*,
// listens on 127.0.0.1 at a free port with its Unix socket in that
// directory, lets root in over TCP without a password, and is killed and
// removed when the test ends. It runs with a small buffer pool and without
// durable flushing or the performance schema, so that several can run at
// once on a small machine. mariadbd refuses to run as root, so a test
// running as root hands the directory to the mysql user and starts the
// server with --user=mysql.
package mycluster

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

const (
	// dirPrefix names the directories servers live in, so that those of
	// killed tests can be found and removed.
	dirPrefix = "outbox-relay-mycluster-"
	// lockName is the file in a server's directory that the test process
	// holding the server keeps locked (flock) while it runs: the kernel
	// drops the lock when the process dies, however it dies.
	lockName = "lock"
	// logName is the server's error log, in its directory.
	logName = "error.log"
	// readyTimeout bounds the wait for a started server to accept
	// connections.
	readyTimeout = 60 * time.Second
	// stopTimeout bounds the wait for a server to exit after a signal.
	stopTimeout = 60 * time.Second
	// pollInterval is how often readiness is checked.
	pollInterval = 50 * time.Millisecond
	// portAttempts is how many free ports Start tries when the one it
	// picked is taken before the server binds it.
	portAttempts = 3
	// staleAge is how old an unlocked directory must be before Start
	// removes it: a new one is unlocked for the moment between its
	// creation and its lock.
	staleAge = 10 * time.Second
	// logTailLines is how much of the error log a failure shows.
	logTailLines = 40
	// serverUser runs the server when the test runs as root.
	serverUser = "mysql"
)

// Options configures a server.
type Options struct {
	// Args are extra mariadbd command-line options. They come after the
	// package's own, so they override them (e.g. "--binlog-format=STATEMENT",
	// "--server-id=7").
	Args []string
}

// Cluster is a running (or stopped) private MariaDB server. Its methods fail
// the test they are given on error.
type Cluster struct {
	installDB string     // mariadb-install-db
	server    string     // mariadbd
	dir       string     // the server's directory under /var/tmp
	data      string     // the data directory, in dir
	owner     *user.User // runs the server when the test runs as root; nil otherwise
	port      int
	serverID  int
	args      []string // mariadbd's command line, after the binary
	lock      *os.File // flock'ed while the server is in use

	mu     sync.Mutex
	proc   *os.Process   // the running server; nil when stopped
	exited chan struct{} // closed when proc has exited
}

// Start initialises and starts a server with the binary log on
// (--log-bin --binlog-format=ROW --binlog-row-image=FULL), a server id of
// its own, utf8mb4, a 64 MB buffer pool, --innodb-flush-log-at-trx-commit=2,
// --sync-binlog=0 and no performance schema, listening on 127.0.0.1 at a
// free port, with root allowed in over TCP without a password, plus
// opts.Args. It registers t.Cleanup to kill the server and remove its
// directory. It skips the test only when no MariaDB server binaries can be
// found; any other failure is fatal and shows the tail of the error log.
//
// Start first removes (best effort) the directories of servers whose tests
// died without cleaning up, killing their servers if they still run.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	return start(t, opts, freePort)
}

// start is Start with the function that picks a free port.
func start(t testing.TB, opts Options, pickPort func() (int, error)) *Cluster {
	t.Helper()
	installDB, server, err := serverBinaries()
	if err != nil {
		t.Skipf("mycluster: %v", err)
	}
	sweepOnce.Do(func() { sweep(baseDir(), staleAge) })

	c := &Cluster{installDB: installDB, server: server}
	if os.Geteuid() == 0 {
		if c.owner, err = user.Lookup(serverUser); err != nil {
			t.Fatalf("mycluster: running as root needs the %s user to run the server: %v", serverUser, err)
		}
	}
	c.makeDir(t)
	c.install(t)

	for attempt := 1; ; attempt++ {
		if c.port, err = pickPort(); err != nil {
			t.Fatalf("mycluster: %v", err)
		}
		c.args = c.serverArgs(opts)
		logStart := c.logSize()
		if err := c.launch(); err != nil {
			c.fatal(t, "starting mariadbd", err)
		}
		err = c.waitReady()
		if err == nil {
			break
		}
		// Another process may have bound the port between freePort
		// closing it and the server binding it.
		if log := c.logSince(logStart); attempt < portAttempts &&
			(strings.Contains(log, "Address already in use") || strings.Contains(log, "Bind on TCP/IP port")) {
			t.Logf("mycluster: port %d was taken, trying another", c.port)
			c.killAndWait()
			continue
		}
		c.fatal(t, "waiting for the server", err)
	}
	c.readServerID(t)
	return c
}

// makeDir makes the server's locked directory, owned by the user the server
// runs as, and registers the cleanup that kills the server and removes it —
// before anything can fail, so that a failed start leaves nothing either.
func (c *Cluster) makeDir(t testing.TB) {
	t.Helper()
	var err error
	if c.dir, err = os.MkdirTemp(baseDir(), dirPrefix); err != nil {
		t.Fatalf("mycluster: %v", err)
	}
	c.data = filepath.Join(c.dir, "data")
	t.Cleanup(c.cleanup)
	if c.lock, err = lockDir(c.dir); err != nil {
		t.Fatalf("mycluster: %v", err)
	}
	if err := c.chown(); err != nil {
		t.Fatalf("mycluster: %v", err)
	}
}

// install runs mariadb-install-db: system tables only (no test database),
// and root with ordinary password authentication and an empty password,
// as root@localhost and root@127.0.0.1 (which is what a server that does
// not resolve names sees a TCP connection from 127.0.0.1 as). Its
// temporary tables go in the server's directory, not /tmp: bootstraps run
// at once there were seen to trip over each other's #sql-temptable-…
// files ("Error on delete of '/tmp/#sql-temptable-6a3-1-2.MAD'", or a
// crash in ha_maria::drop_table), which a private tmpdir ends.
func (c *Cluster) install(t testing.TB) {
	t.Helper()
	args := []string{"--no-defaults", "--datadir=" + c.data, "--tmpdir=" + c.dir,
		"--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve",
		"--innodb-log-file-size=16M", "--innodb-buffer-pool-size=64M"}
	if c.owner != nil {
		args = append(args, "--user="+c.owner.Username)
	}
	cmd := exec.Command(c.installDB, args...)
	cmd.Dir = c.dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mycluster: mariadb-install-db: %v\n%s", err, out)
	}
	// mariadb-install-db leaves some files root's.
	if err := c.chown(); err != nil {
		t.Fatalf("mycluster: %v", err)
	}
}

// serverArgs is mariadbd's command line: --no-defaults first (it must be),
// then the package's options, then opts.Args, which override them.
func (c *Cluster) serverArgs(opts Options) []string {
	args := []string{
		"--no-defaults",
		"--datadir=" + c.data,
		"--port=" + strconv.Itoa(c.port),
		"--bind-address=127.0.0.1",
		"--socket=" + filepath.Join(c.dir, "sock"),
		"--pid-file=" + filepath.Join(c.dir, "mariadbd.pid"),
		"--log-error=" + filepath.Join(c.dir, logName),
		"--tmpdir=" + c.dir, // not /tmp: see install
		"--log-bin=" + filepath.Join(c.data, "binlog"),
		"--binlog-format=ROW",
		"--binlog-row-image=FULL",
		// The port: unique among the servers running here, and never 0.
		"--server-id=" + strconv.Itoa(c.port),
		"--skip-name-resolve",
		"--character-set-server=utf8mb4",
		"--collation-server=utf8mb4_general_ci",
		"--innodb-buffer-pool-size=64M",
		"--innodb-log-file-size=16M",
		"--innodb-flush-log-at-trx-commit=2",
		"--sync-binlog=0",
		"--performance-schema=OFF",
	}
	if c.owner != nil {
		args = append(args, "--user="+c.owner.Username)
	}
	return append(args, opts.Args...)
}

// launch starts mariadbd with c.args, its output going to the error log
// (which holds what it says before it opens the log itself).
func (c *Cluster) launch() error {
	logf, err := os.OpenFile(filepath.Join(c.dir, logName), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return err
	}
	defer logf.Close()
	if c.owner != nil {
		uid, _ := strconv.Atoi(c.owner.Uid)
		gid, _ := strconv.Atoi(c.owner.Gid)
		if err := logf.Chown(uid, gid); err != nil {
			return err
		}
	}
	cmd := exec.Command(c.server, c.args...)
	cmd.Dir = c.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group: a Ctrl-C meant for the tests does not
	// reach it, and the test decides when it stops.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	c.mu.Lock()
	c.proc, c.exited = cmd.Process, exited
	c.mu.Unlock()
	return nil
}

// running returns the server's process and the channel closed when it
// exits; nil, nil when there is none or it has exited.
func (c *Cluster) running() (*os.Process, chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil {
		return nil, nil
	}
	select {
	case <-c.exited:
		return nil, nil
	default:
		return c.proc, c.exited
	}
}

// isRunning tells whether the server process runs.
func (c *Cluster) isRunning() bool {
	p, _ := c.running()
	return p != nil
}

// waitReady pings the server until it answers, for at most readyTimeout,
// and fails at once if the server exits.
func (c *Cluster) waitReady() error {
	_, exited := c.running()
	if exited == nil {
		return errors.New("the server exited")
	}
	deadline := time.Now().Add(readyTimeout)
	for {
		err := c.ping()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the server on port %d did not accept connections within %s: %w", c.port, readyTimeout, err)
		}
		select {
		case <-exited:
			return fmt.Errorf("the server exited before accepting connections (last error: %w)", err)
		case <-time.After(pollInterval):
		}
	}
}

func (c *Cluster) ping() error {
	db, err := sql.Open("mysql", c.DSN(""))
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return db.PingContext(ctx)
}

// readServerID asks the server its server_id, which opts.Args may have set.
func (c *Cluster) readServerID(t testing.TB) {
	t.Helper()
	db, err := sql.Open("mysql", c.DSN(""))
	if err != nil {
		t.Fatalf("mycluster: %v", err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := db.QueryRowContext(ctx, "SELECT @@server_id").Scan(&c.serverID); err != nil {
		c.fatal(t, "SELECT @@server_id", err)
	}
}

// Port is the port the server listens on.
func (c *Cluster) Port() int { return c.port }

// ServerID is the server's server_id: the port unless Options.Args set
// another.
func (c *Cluster) ServerID() int { return c.serverID }

// URL is the storage URL of database on the server, as root without a
// password: mysql://root@127.0.0.1:PORT/database, the form the relay's
// STORAGE_URL and internal/harness/mysqltest take. URL("") names the server.
func (c *Cluster) URL(database string) string {
	return fmt.Sprintf("mysql://root@127.0.0.1:%d/%s", c.port, database)
}

// DSN is the go-sql-driver/mysql data source name of database on the
// server, as root without a password, with parseTime=true (and the
// driver's default loc=UTC): root@tcp(127.0.0.1:PORT)/database?parseTime=true.
func (c *Cluster) DSN(database string) string {
	cfg := mysql.NewConfig()
	cfg.User = "root"
	cfg.Net = "tcp"
	cfg.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port))
	cfg.DBName = database
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	return cfg.FormatDSN()
}

// DB opens a database/sql pool on the server as root, with no default
// database, for what a test does as the administrator (creating users,
// PURGE BINARY LOGS, reading SHOW BINLOG EVENTS). t.Cleanup closes it.
func (c *Cluster) DB(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", c.DSN(""))
	if err != nil {
		t.Fatalf("mycluster: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// CreateDatabase creates a fresh, uniquely named database and returns its
// name. t.Cleanup drops it if the server is running then.
func (c *Cluster) CreateDatabase(t testing.TB) string {
	t.Helper()
	name := databaseName(t.Name())
	if err := c.exec("CREATE DATABASE `" + name + "`"); err != nil {
		t.Fatalf("mycluster: creating database %s: %v", name, err)
	}
	t.Cleanup(func() {
		if !c.isRunning() {
			return
		}
		if err := c.exec("DROP DATABASE IF EXISTS `" + name + "`"); err != nil {
			t.Errorf("mycluster: dropping database %s: %v", name, err)
		}
	})
	return name
}

// exec runs one statement as root over a connection of its own.
func (c *Cluster) exec(query string) error {
	db, err := sql.Open("mysql", c.DSN(""))
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	_, err = db.ExecContext(ctx, query)
	return err
}

// Stop shuts the server down cleanly (SIGTERM, as mariadb-admin shutdown
// would) and waits until it has exited, which ends every connection.
func (c *Cluster) Stop(t testing.TB) {
	t.Helper()
	c.signalAndWait(t, syscall.SIGTERM, "stopping the server")
}

// Kill kills the server (SIGKILL), as a crash would: nothing is flushed and
// no connection is told. Start then recovers it, as after a crash.
func (c *Cluster) Kill(t testing.TB) {
	t.Helper()
	c.signalAndWait(t, syscall.SIGKILL, "killing the server")
}

func (c *Cluster) signalAndWait(t testing.TB, sig syscall.Signal, what string) {
	t.Helper()
	p, exited := c.running()
	if p == nil {
		t.Fatalf("mycluster: %s: it is not running", what)
	}
	if err := p.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		c.fatal(t, what, err)
	}
	select {
	case <-exited:
	case <-time.After(stopTimeout):
		c.fatal(t, what, fmt.Errorf("the server did not exit within %s", stopTimeout))
	}
}

// Start starts the server again after Stop or Kill, on the same port, with
// the same data and options, and waits until it accepts connections.
func (c *Cluster) Start(t testing.TB) {
	t.Helper()
	if c.isRunning() {
		t.Fatal("mycluster: Start: the server is already running")
	}
	if err := c.launch(); err != nil {
		c.fatal(t, "starting mariadbd", err)
	}
	if err := c.waitReady(); err != nil {
		c.fatal(t, "waiting for the server", err)
	}
}

// Restart stops the server cleanly and starts it again (Stop, then Start):
// every connection ends; the port and the data stay.
func (c *Cluster) Restart(t testing.TB) {
	t.Helper()
	c.Stop(t)
	c.Start(t)
}

// fatal fails the test with err and the tail of the error log.
func (c *Cluster) fatal(t testing.TB, what string, err error) {
	t.Helper()
	t.Fatalf("mycluster: %s: %v\n--- last %d lines of %s ---\n%s", what, err, logTailLines,
		filepath.Join(c.dir, logName), c.logTail(logTailLines))
}

func (c *Cluster) logSize() int64 {
	fi, err := os.Stat(filepath.Join(c.dir, logName))
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logSince is what the server logged after the log was offset bytes long.
func (c *Cluster) logSince(offset int64) string {
	b, _ := os.ReadFile(filepath.Join(c.dir, logName))
	if offset > int64(len(b)) {
		offset = 0
	}
	return string(b[offset:])
}

func (c *Cluster) logTail(n int) string {
	b, err := os.ReadFile(filepath.Join(c.dir, logName))
	if err != nil {
		return fmt.Sprintf("(no error log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// killAndWait kills the server process if it runs and waits for it.
func (c *Cluster) killAndWait() {
	p, exited := c.running()
	if p == nil {
		return
	}
	_ = p.Kill()
	select {
	case <-exited:
	case <-time.After(stopTimeout):
	}
}

// cleanup kills the server, whatever state it is in, and removes its
// directory. The data is thrown away, so there is nothing to shut down
// cleanly for.
func (c *Cluster) cleanup() {
	c.killAndWait()
	if c.data != "" {
		// One this process did not start, or that outlived a failed
		// wait: make sure.
		killServers(c.data)
	}
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
	}
	if c.lock != nil {
		_ = c.lock.Close()
	}
}

// chown gives everything in the directory to the user the server runs as,
// when the test runs as root.
func (c *Cluster) chown() error {
	if c.owner == nil {
		return nil
	}
	return chownAll(c.dir, c.owner)
}

// databaseName is a new database's name: the test's name, made an
// identifier, and random hex so that it is unique; at most 64 characters.
func databaseName(testName string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(testName) {
		if b.Len() >= 40 {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
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

// baseDir is where server directories go: /var/tmp, which the mysql user
// can enter (a TMPDIR under /root would not let it) and which is on disk
// rather than in memory.
func baseDir() string { return "/var/tmp" }

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

// Finding the server binaries.

var (
	binOnce      sync.Once
	binInstallDB string
	binServer    string
	binErr       error
)

// serverBinaries are mariadb-install-db and mariadbd: Debian's paths, else
// the ones on PATH (MySQL-era names included).
func serverBinaries() (installDB, server string, err error) {
	binOnce.Do(func() {
		binInstallDB = findBinary("/usr/bin/mariadb-install-db", "mariadb-install-db", "mysql_install_db")
		binServer = findBinary("/usr/sbin/mariadbd", "mariadbd", "mysqld")
		if binInstallDB == "" || binServer == "" {
			binErr = errors.New("no MariaDB server binaries (mariadb-install-db, mariadbd) in /usr/bin, /usr/sbin " +
				"or on PATH; scripts/services.sh mariadb installs them")
		}
	})
	return binInstallDB, binServer, binErr
}

func findBinary(path string, names ...string) string {
	if isExecutable(path) {
		return path
	}
	for _, name := range names {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// Removing what killed tests left.

var sweepOnce sync.Once

// sweep removes, best effort, the server directories under base that no
// live test process holds, killing their servers first if they still run.
func sweep(base string, minAge time.Duration) {
	dirs, _ := filepath.Glob(filepath.Join(base, dirPrefix+"*"))
	for _, dir := range dirs {
		sweepDir(dir, minAge)
	}
}

// sweepDir removes dir if it is at least minAge old and its lock is free,
// that is if the test process that made it has ended without removing it.
// A server still running in it is killed: nothing else would ever stop it.
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
	killServers(filepath.Join(dir, "data"))
	_ = os.RemoveAll(dir)
}

// killServers kills (SIGKILL) every mariadbd running on data and waits,
// for a while, until they have gone. The processes are found by their
// command lines, so that one killed before it wrote its pid file is found
// too and a recycled pid is never signalled.
func killServers(data string) {
	for _, pid := range serversOf(data) {
		if syscall.Kill(pid, syscall.SIGKILL) != nil {
			continue // gone, or not ours to signal
		}
		deadline := time.Now().Add(10 * time.Second)
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(pollInterval)
		}
	}
}

// serversOf lists the live mariadbd processes started with --datadir=data.
func serversOf(data string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if isServerOf(pid, data) && alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// isServerOf tells whether pid is a mariadbd (or mysqld) started on data.
func isServerOf(pid int, data string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	if len(args) == 0 {
		return false
	}
	if name := filepath.Base(args[0]); name != "mariadbd" && name != "mysqld" {
		return false
	}
	for _, a := range args[1:] {
		if a == "--datadir="+data {
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

// PID is the running server's process id (0 when it is stopped), for
// benchmarks that read its CPU time.
func (c *Cluster) PID() int {
	p, _ := c.running()
	if p == nil {
		return 0
	}
	return p.Pid
}
