// Package mysql is the MySQL and MariaDB storage driver
// (github.com/go-sql-driver/mysql), for MySQL 8.0.13 or later and MariaDB
// 10.6 or later. It claims a batch in one short transaction (SELECT … FOR
// UPDATE SKIP LOCKED, then one UPDATE), settles each outcome of a batch with
// one statement, and guards every transition out of DELIVERING with the
// lease (relay id and locked_at) that claimed the row. MySQL cannot notify
// the relay of inserts, so relays on it poll. Register it by importing the
// package; it serves mysql:// URLs.
package mysql

import (
	"context"
	"crypto/tls"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-relay/relay/internal/redact"
	"github.com/outbox-relay/relay/internal/tlsconfig"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/driverkit"
	schema "github.com/outbox-relay/relay/schema/mysql"
)

func init() {
	storage.Register(storage.NewDriver("MySQL", schema.DefaultTable, schema.ParseTable, Open), "mysql")
	// MariaDB is served by this driver, under MySQL's scheme.
	storage.Alias("mariadb", "mysql")
}

// ConnectTimeoutDefault bounds connecting when the URL sets no timeout.
const ConnectTimeoutDefault = 10 * time.Second

// PoolMaxConnsDefault sizes the pool when the URL sets no pool_max_conns:
// one claim, several settles in flight, the reaper and the stats reader.
const PoolMaxConnsDefault = 10

// PortDefault is MySQL's port, used when the URL names none.
const PortDefault = 3306

// The URL parameters the driver reads itself; every other one goes to
// go-sql-driver/mysql.
const (
	paramTable        = "table"
	paramPoolMaxConns = "pool_max_conns"
	paramSocket       = "socket"
	paramTLSCA        = "tls_ca"
	paramTLSCert      = "tls_cert"
	paramTLSKey       = "tls_key"
)

// forcedParams are go-sql-driver parameters the driver depends on and sets
// itself; a URL may not change them.
var forcedParams = []string{
	"parseTime", "loc", "time_zone", "clientFoundRows", "interpolateParams", "multiStatements",
}

//go:embed sql/*.sql
var sqlFiles embed.FS

// Store is the MySQL outbox table.
type Store struct {
	db *sql.DB
	// generation counts recycles: connections made before the last one
	// are discarded (session.go).
	generation *atomic.Uint64
	cfg        *mysql.Config
	table      schema.Table
	database   string // the table's database: its qualifier or the URL's
	queries    map[string]string
	writer     *Writer
	rawURL     string
	// claimLock is the GET_LOCK name that serialises ordered claims on
	// this table, server-wide.
	claimLock string
	// retentionLock is the GET_LOCK name that keeps retention on this
	// table to one relay at a time.
	retentionLock string
	// cursors are where each relay's unordered claims have got to.
	cursors cursors
	// flavour is MariaDB or MySQL, once asked (logrecord.go).
	flavour atomic.Int32
}

var (
	_ storage.Storage         = (*Store)(nil)
	_ storage.SQLDatabase     = (*Store)(nil)
	_ storage.RetentionLocker = (*Store)(nil)
	_ storage.ClaimBounder    = (*Store)(nil)
	_ storage.LogRecorder     = (*Store)(nil)
)

// SQL returns the store's database/sql handle.
func (s *Store) SQL() (*sql.DB, string) { return s.db, "mysql" }

// Open creates a connection pool for rawURL without connecting yet; call
// Check to find out whether the database and table are usable.
//
// The URL is mysql://user:password@host:port/database?options. The driver
// reads table (default openoutbox_events; database.table names another
// database), pool_max_conns (default 10), socket (a Unix socket path
// instead of host:port) and tls_ca, tls_cert and tls_key (PEM files: a CA
// to verify the server with, a client certificate); every other option
// goes to go-sql-driver/mysql:
// tls, timeout, readTimeout, writeTimeout, charset, collation,
// allowCleartextPasswords, serverPubKey, connectionAttributes, and server
// variables by name (innodb_lock_wait_timeout=10). The driver sets
// parseTime, loc=UTC, time_zone='+00:00', clientFoundRows and
// interpolateParams itself, and every session to READ COMMITTED.
func Open(ctx context.Context, rawURL string) (*Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "mysql" {
		return nil, fmt.Errorf("malformed storage URL %q: want mysql://user:password@host:3306/database", redact.URL(rawURL))
	}
	q := u.Query()
	for _, p := range forcedParams {
		if q.Has(p) {
			return nil, fmt.Errorf("storage URL %s: the MySQL driver sets %s itself; remove it from the URL", redact.URL(rawURL), p)
		}
	}
	tableName := q.Get(paramTable)
	if tableName == "" {
		tableName = schema.DefaultTable
	}
	table, err := schema.ParseTable(tableName)
	if err != nil {
		return nil, err
	}
	poolMax := PoolMaxConnsDefault
	if v := q.Get(paramPoolMaxConns); v != "" {
		if poolMax, err = strconv.Atoi(v); err != nil || poolMax < 1 {
			return nil, fmt.Errorf("storage URL %s: pool_max_conns must be a positive number, got %q", redact.URL(rawURL), v)
		}
	}
	socket := q.Get(paramSocket)
	tlsConfig, err := tlsFiles(q)
	if err != nil {
		return nil, fmt.Errorf("storage URL %s: %w", redact.URL(rawURL), err)
	}
	for _, p := range []string{paramTable, paramPoolMaxConns, paramSocket, paramTLSCA, paramTLSCert, paramTLSKey} {
		q.Del(p)
	}

	// go-sql-driver parses its options from a DSN; the credentials and the
	// address are set on the parsed config rather than pasted into one, so
	// that no character of a password can change how the DSN reads.
	database := strings.TrimPrefix(u.Path, "/")
	if strings.Contains(database, "/") {
		return nil, fmt.Errorf("storage URL %s: the path must be one database name", redact.URL(rawURL))
	}
	cfg, err := mysql.ParseDSN("/" + url.PathEscape(database) + "?" + q.Encode())
	if err != nil {
		return nil, fmt.Errorf("parse storage URL: %s", redact.Error(err, rawURL))
	}
	cfg.DBName = database
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	if socket != "" {
		cfg.Net, cfg.Addr = "unix", socket
	} else {
		port := u.Port()
		if port == "" {
			port = strconv.Itoa(PortDefault)
		}
		host := u.Hostname()
		if host == "" {
			host = "127.0.0.1"
		}
		cfg.Net, cfg.Addr = "tcp", net.JoinHostPort(host, port)
	}
	if tlsConfig != nil {
		cfg.TLS = tlsConfig // go-sql-driver names the server after the host
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	cfg.ClientFoundRows = true // Renew to the stamp the rows hold already counts them
	cfg.InterpolateParams = true
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["time_zone"] = "'+00:00'"
	if cfg.Timeout == 0 {
		cfg.Timeout = ConnectTimeoutDefault
	}
	// go-sql-driver logs to stderr in a format of its own; every failure
	// it logs also comes back as an error, which the relay logs.
	cfg.Logger = &mysql.NopLogger{}

	if database == "" && table.Database == "" {
		return nil, fmt.Errorf("storage URL %s names no database: put it in the path (mysql://user@host:3306/app) or qualify the table (table=app.%s)",
			redact.URL(rawURL), table.Name)
	}
	if table.Database != "" {
		database = table.Database
	}

	inner, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("storage URL: %s", redact.Error(err, rawURL))
	}
	generation := new(atomic.Uint64)
	db := sql.OpenDB(sessionConnector{Connector: inner, generation: generation})
	db.SetMaxOpenConns(poolMax)
	db.SetMaxIdleConns(poolMax)
	db.SetConnMaxIdleTime(5 * time.Minute)

	queries, err := loadQueries(table)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return &Store{
		db: db, generation: generation, cfg: cfg, table: table, database: database, queries: queries,
		writer: newWriter(table), rawURL: rawURL,
		claimLock:     "outbox_relay.claim." + lockSuffix(database+"."+table.Name),
		retentionLock: "outbox_relay.retention." + lockSuffix(database+"."+table.Name),
	}, nil
}

// tlsFiles reads the tls_ca, tls_cert and tls_key options into a TLS
// configuration that verifies the server (against tls_ca rather than the
// system's roots, when given) and presents a client certificate when asked
// to; nil when none is set. go-sql-driver's own tls option can only name a
// configuration registered in code, so a private CA needs these.
func tlsFiles(q url.Values) (*tls.Config, error) {
	files := tlsconfig.Files{CA: q.Get(paramTLSCA), Cert: q.Get(paramTLSCert), Key: q.Get(paramTLSKey)}
	if files.IsZero() {
		return nil, nil
	}
	if q.Has("tls") {
		return nil, errors.New("tls_ca, tls_cert and tls_key turn verified TLS on by themselves; remove the tls option")
	}
	return files.Config()
}

// lockSuffix keeps a lock name within MySQL's 64 characters: the name
// itself when short, else a hash of it.
func lockSuffix(name string) string {
	if len(name) <= 40 {
		return name
	}
	var h uint64 = 14695981039346656037 // FNV-1a
	for i := 0; i < len(name); i++ {
		h ^= uint64(name[i])
		h *= 1099511628211
	}
	return name[:20] + "#" + strconv.FormatUint(h, 36)
}

func loadQueries(table schema.Table) (map[string]string, error) {
	return driverkit.LoadQueries(sqlFiles, "sql", func(q string) string { return schema.Expand(withoutComments(q), table) })
}

// withoutComments drops the comment lines of a query. They would travel
// with every statement, and go-sql-driver, which fills in the arguments
// itself (interpolateParams), counts a question mark in a comment as a
// placeholder.
func withoutComments(query string) string {
	var lines []string
	for _, line := range strings.Split(query, "\n") {
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "--") {
			lines = append(lines, line)
		}
	}
	return strings.Join(lines, "\n")
}

// mustReadSQL returns the embedded sql/<name>.sql, unexpanded.
func mustReadSQL(name string) string { return driverkit.MustReadQuery(sqlFiles, "sql/"+name+".sql") }

// Database returns the table's database: its qualifier, else the URL's.
func (s *Store) Database() string { return s.database }

// Table returns the table's name, as given (table or database.table).
func (s *Store) Table() string { return s.table.String() }

// Describe says where the table is, without the password.
func (s *Store) Describe() string {
	return fmt.Sprintf("%s as user %q, table %s", s.location(), s.cfg.User, s.table)
}

// location names the server and database the table is looked for in, never
// the password. Errors about a missing table or an unreachable server carry
// it, so that "run relay-cli migrate" cannot send anyone to the wrong
// database.
func (s *Store) location() string {
	// The table's database, which a schema-qualified table name may set
	// apart from the URL's (the one driverkit.ConnError names).
	return fmt.Sprintf("MySQL at %s database %q", s.address(), s.database)
}

// tableMissing is the error for a table that is not in the database, with
// where it was looked for and how to create it there.
func (s *Store) tableMissing(what string) error {
	return driverkit.TableMissing(what, s.table.Name, s.location())
}

func (s *Store) address() string {
	if s.cfg.Net == "unix" {
		return "socket " + s.cfg.Addr
	}
	return s.cfg.Addr
}

// DB exposes the connection pool, for tests and tools that need SQL the
// Store does not offer.
func (s *Store) DB() *sql.DB { return s.db }

// Close closes every connection.
func (s *Store) Close() { _ = s.db.Close() }

// Check reaches the database and verifies that the table exists with every
// column the relay uses. Its errors say what to do.
func (s *Store) Check(ctx context.Context) error {
	rows, err := s.db.QueryContext(ctx, s.queries["columns"], s.database, s.table.Name)
	if err != nil {
		return s.queryError("check table", err)
	}
	defer rows.Close()
	var have []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return s.queryError("check table", err)
		}
		have = append(have, strings.ToLower(c))
	}
	if err := rows.Err(); err != nil {
		return s.queryError("check table", err)
	}
	if len(have) == 0 {
		return s.tableMissing("")
	}
	if err := driverkit.CheckColumns(s.table.Name, s.location(), have, "seq", "state_at"); err != nil {
		return err
	}
	// A table an older release migrated has the columns but not what this
	// one claims through: its statements name these indexes.
	objects, err := s.schemaObjects(ctx, s.db)
	if err != nil {
		return s.queryError("check table", err)
	}
	var missing []string
	for _, want := range []string{
		"expression state_at", "index " + s.table.Name + "_state_seq_idx", "index " + s.table.Name + "_key_order_seq_idx",
	} {
		if !slices.Contains(objects, want) {
			missing = append(missing, want)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("table %s lacks %s, which this release of the relay uses; run `relay-cli migrate`",
			s.table, strings.Join(missing, ", "))
	}
	return nil
}

// MySQL error numbers the driver tells apart.
const (
	errAccessDenied      = 1045 // wrong user or password
	errDBAccessDenied    = 1044 // the user may not use the database
	errBadDB             = 1049 // no such database
	errHostNotPrivileged = 1130 // the user may not connect from this host
	errTooManyConns      = 1040
	errUserLimitReached  = 1226
	errNoSuchTable       = 1146
	errLockWaitTimeout   = 1205
	errLockDeadlock      = 1213
	errQueryInterrupted  = 1317
	errConnKilled        = 1927 // MariaDB: the connection was killed
	errServerShutdown    = 1053
)

// queryError explains err: a database that cannot be reached, or a
// statement the server refused (such as a missing privilege). It recycles
// the pool's connections when a session setting may have caused err.
func (s *Store) queryError(what string, err error) error {
	s.recycle(err)
	return driverkit.QueryError(s.server(), s.table.String(), what, err, connFailure)
}

// server names the database for driverkit.ConnError.
func (s *Store) server() driverkit.Server {
	return driverkit.Server{
		Where: "MySQL at " + s.address(),
		User:  s.cfg.User, Database: s.cfg.DBName, LoginHint: "the hosts the account may connect from", RawURL: s.rawURL,
	}
}

// connFailure reports whether err means the database could not be reached
// or refused the login, as opposed to a statement it rejected, and which.
func connFailure(err error) (driverkit.ConnFailure, bool) {
	var myErr *mysql.MySQLError
	switch {
	case err == nil:
		return driverkit.CannotReach, false
	case !errors.As(err, &myErr):
		return driverkit.CannotReach, !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) &&
			!errors.Is(err, sql.ErrNoRows) && !errors.Is(err, sql.ErrTxDone)
	}
	switch myErr.Number {
	case errAccessDenied, errHostNotPrivileged:
		return driverkit.LoginRefused, true
	case errBadDB:
		return driverkit.NoDatabase, true
	case errDBAccessDenied:
		return driverkit.DatabaseDenied, true
	case errTooManyConns, errUserLimitReached, errServerShutdown, errConnKilled:
		return driverkit.CannotReach, true
	}
	return driverkit.CannotReach, false
}

// retryable reports whether err is a lock conflict that InnoDB resolved by
// rolling the statement or transaction back: running it again is safe and
// will most likely succeed.
func retryable(err error) bool {
	var myErr *mysql.MySQLError
	return errors.As(err, &myErr) && (myErr.Number == errLockDeadlock || myErr.Number == errLockWaitTimeout)
}

// lockRetries bounds how often one call runs again after a deadlock or
// lock-wait timeout before it returns the error.
const lockRetries = 10

// withLockRetry runs fn until it succeeds, fails otherwise than by a lock
// conflict, or has met lockRetries of them, pausing briefly (with jitter, so
// that the transactions that collided do not collide again) in between.
func withLockRetry(ctx context.Context, fn func() error) error {
	pause := time.Millisecond
	for attempt := 0; ; attempt++ {
		err := fn()
		if err == nil || !retryable(err) || attempt == lockRetries {
			return err
		}
		t := time.NewTimer(pause/2 + rand.N(pause))
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// stamp formats t for a DATETIME(6) comparison or assignment: UTC,
// microseconds. A string goes to the server as written, whatever the
// connection's loc, so a stamp the driver returned compares equal to the
// stored value.
func stamp(t time.Time) string {
	return t.UTC().Format("2006-01-02 15:04:05.000000")
}

func microseconds(us int64) time.Duration { return time.Duration(us) * time.Microsecond }
