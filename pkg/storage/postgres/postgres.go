// Package postgres is the PostgreSQL storage driver (pgx/v5). It claims and
// settles whole batches with one statement each, either holding a batch's
// rows under the claim's open transaction (storage.HeldQueue, held.go) or
// leasing them, guarding every transition out of DELIVERING with the lease
// (relay id and locked_at) that claimed the row. Register it by importing the package; it serves postgres:// and
// postgresql:// URLs.
package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/outbox-relay/relay/internal/redact"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/driverkit"
	schema "github.com/outbox-relay/relay/schema/postgres"
)

func init() {
	storage.Register(storage.NewDriver("PostgreSQL", schema.DefaultTable, schema.ParseTable, Open), "postgres", "postgresql")
	// Short names other tools accept, for the unknown scheme's did-you-mean.
	storage.Alias("pg", "postgres")
	storage.Alias("pgsql", "postgres")
	storage.Alias("psql", "postgres")
}

// EnvVariables are the libpq variables pgx reads when it parses a URL, so
// that the programs checking their environment for misspelt settings take
// none of them for one.
var EnvVariables = []string{
	"PGHOST", "PGPORT", "PGDATABASE", "PGUSER", "PGPASSWORD", "PGPASSFILE", "PGSERVICE", "PGSERVICEFILE",
	"PGSSLMODE", "PGSSLCERT", "PGSSLKEY", "PGSSLROOTCERT", "PGSSLPASSWORD", "PGSSLSNI", "PGAPPNAME",
	"PGCONNECT_TIMEOUT", "PGTARGETSESSIONATTRS", "PGOPTIONS", "PGSSLNEGOTIATION", "PGMINPROTOCOLVERSION", "PGMAXPROTOCOLVERSION",
}

// ConnectTimeoutDefault bounds connecting when neither the URL's
// connect_timeout nor PGCONNECT_TIMEOUT does.
const ConnectTimeoutDefault = 10 * time.Second

// PoolMaxConnsDefault sizes the pool when the URL sets no pool_max_conns:
// one claim, several settles in flight, the reaper and the stats reader.
const PoolMaxConnsDefault = 10

// PoolMaxConnLifetimeDefault bounds a pooled connection's life when the URL
// sets no pool_max_conn_lifetime (pgx's own default is an hour). A
// connection keeps the settings its session took from the role and the
// database at login (ALTER ROLE … SET search_path, work_mem, …) for as long
// as it lives, so this is how long a corrected setting that causes no error
// can take to reach every connection; settings that make statements fail are
// picked up at once (see recycle).
const PoolMaxConnLifetimeDefault = 5 * time.Minute

// PoolMaxConnLifetimeJitterDefault spreads the replacement of connections
// opened together (at start, or after a recycle) over a minute.
const PoolMaxConnLifetimeJitterDefault = time.Minute

// Store is the PostgreSQL outbox table.
type Store struct {
	pool    *pgxpool.Pool
	table   schema.Table
	queries map[string]string
	writer  *Writer
	rawURL  string
	// connURL is rawURL without the relay's own parameters, as pgx takes
	// it (the WAL reader's replication connection starts from it).
	connURL string

	sqlOnce sync.Once
	sqlDB   *sql.DB

	// states are the relays' claim states (claimstate.go).
	states claimStates

	// partitionLockTimeout and partitionMoveLimit replace
	// PartitionLockTimeout and PartitionMoveLimit in tests.
	partitionLockTimeout time.Duration
	partitionMoveLimit   int64
}

var (
	_ storage.Storage         = (*Store)(nil)
	_ storage.Notifier        = (*Store)(nil)
	_ storage.SQLDatabase     = (*Store)(nil)
	_ storage.RetentionLocker = (*Store)(nil)
)

// Open creates a connection pool for rawURL without connecting yet; call
// Check to find out whether the database and table are usable. The table
// comes from the URL's table parameter (default openoutbox_events); every
// other parameter goes to pgx, including pool_max_conns,
// pool_max_conn_lifetime and sslmode.
func Open(ctx context.Context, rawURL string) (*Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("malformed storage URL %q", redact.URL(rawURL))
	}
	q := u.Query()
	tableName := q.Get("table")
	if tableName == "" {
		tableName = schema.DefaultTable
	}
	table, err := schema.ParseTable(tableName)
	if err != nil {
		return nil, err
	}
	q.Del("table")
	if !q.Has("pool_max_conns") {
		q.Set("pool_max_conns", fmt.Sprint(PoolMaxConnsDefault))
	}
	if !q.Has("pool_max_conn_lifetime") {
		q.Set("pool_max_conn_lifetime", PoolMaxConnLifetimeDefault.String())
		if !q.Has("pool_max_conn_lifetime_jitter") {
			q.Set("pool_max_conn_lifetime_jitter", PoolMaxConnLifetimeJitterDefault.String())
		}
	}
	if !q.Has("application_name") {
		q.Set("application_name", "outbox-relay")
	}
	u.RawQuery = q.Encode()

	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		return nil, fmt.Errorf("parse storage URL: %s", redact.Error(err, rawURL, u.String()))
	}
	// pgx waits forever for a server that accepts connections and never
	// answers; a relay or relay-cli stuck there says nothing.
	if cfg.ConnConfig.ConnectTimeout == 0 && !q.Has("connect_timeout") {
		cfg.ConnConfig.ConnectTimeout = ConnectTimeoutDefault
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("create connection pool: %s", redact.Error(err, rawURL, u.String()))
	}
	queries, err := loadQueries(table)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &Store{pool: pool, table: table, queries: queries, writer: newWriter(table), rawURL: rawURL, connURL: u.String()}, nil
}

// SQL returns a database/sql handle over the store's pool.
func (s *Store) SQL() (*sql.DB, string) {
	s.sqlOnce.Do(func() { s.sqlDB = stdlib.OpenDBFromPool(s.pool) })
	return s.sqlDB, "postgres"
}

// ConnString is the storage URL as the database client takes it: without
// the relay's own parameters, with its defaults. It holds the password.
func (s *Store) ConnString() string { return s.connURL }

// TableName is the outbox table, as validated.
func (s *Store) TableName() schema.Table { return s.table }

// Table returns the table's name, as given (table or schema.table).
func (s *Store) Table() string { return s.table.String() }

// Describe says where the table is, without the password.
func (s *Store) Describe() string {
	return fmt.Sprintf("%s as user %q, table %s", s.location(), s.pool.Config().ConnConfig.User, s.table)
}

// location names the server and database the table is looked for in, never
// the password. Errors about a missing table or an unreachable server carry
// it: a STORAGE_URL left unset or misspelt points at the default database,
// and "run relay-cli migrate" without saying where would create the table
// in the wrong one.
func (s *Store) location() string { return s.server().Location() }

// tableMissing is the error for a table that is not in the database, with
// where it was looked for and how to create it there.
func (s *Store) tableMissing(what string) error {
	return driverkit.TableMissing(what, s.table.String(), s.location())
}

// closeWait bounds Close.
const closeWait = 2 * time.Second

// Close closes every connection. To a database that stopped answering,
// pgx says goodbye on each connection for up to 15 s; Close waits closeWait
// for that and then returns, leaving the rest to finish in the background:
// the caller is on its way out, and the server drops the connections when
// the process is gone.
func (s *Store) Close() {
	if s.sqlDB != nil {
		_ = s.sqlDB.Close()
	}
	done := make(chan struct{})
	go func() {
		s.pool.Close()
		close(done)
	}()
	t := time.NewTimer(closeWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// Check reaches the database and verifies that the table exists with every
// column the relay uses. Its errors say what to do.
func (s *Store) Check(ctx context.Context) error {
	rows, err := s.pool.Query(ctx, s.queries["columns"], s.table.Quoted())
	if err != nil {
		return s.queryError("check table", err)
	}
	have, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return s.queryError("check table", err)
	}
	if len(have) == 0 {
		return s.tableMissing("")
	}
	return driverkit.CheckColumns(s.table.String(), s.location(), have, "seq")
}

// sessionErrors are the SQLSTATEs with which a statement fails on a healthy
// connection because of a setting its session took at login from the role or
// the database (ALTER ROLE … SET, ALTER DATABASE … SET) and keeps for as
// long as the connection lives, whatever the DBA changes afterwards. They
// have other causes too (a migration's own lock_timeout, a dropped table);
// a recycle then costs one round of logins, no more.
var sessionErrors = map[string]string{
	"57014": "query_canceled",            // statement_timeout (or an administrator's cancel)
	"55P03": "lock_not_available",        // lock_timeout
	"25006": "read_only_sql_transaction", // default_transaction_read_only, or a primary turned standby
	"42P01": "undefined_table",           // a search_path that no longer finds an unqualified table
}

// recycle closes every pooled connection when err may come from a setting of
// the connection's session, so that the next statement logs in again and
// runs with the role's and database's settings as they are now: a DBA who
// corrects a statement_timeout sees the relay recover at its next attempt,
// not when the pool's connections reach the end of their lifetime. All of
// them go, not only the one that failed: they logged in with the same role,
// and each would fail in turn, one backoff after the other. Connections in
// use are closed when they are released. Between the failures that call it
// the engine backs off, so a setting that stays wrong costs a few logins a
// second at most.
func (s *Store) recycle(err error) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && sessionErrors[pgErr.Code] != "" {
		s.pool.Reset()
	}
}

// queryError explains err: a database that cannot be reached, or a
// statement the server refused (such as a missing privilege). It recycles
// the pool's connections when a session setting may have caused err.
func (s *Store) queryError(what string, err error) error {
	s.recycle(err)
	return driverkit.QueryError(s.server(), s.table.String(), what, err, connFailure)
}

// server names the database for driverkit.ConnError.
func (s *Store) server() driverkit.Server {
	cfg := s.pool.Config().ConnConfig
	return driverkit.Server{
		Where: fmt.Sprintf("PostgreSQL at %s:%d", cfg.Host, cfg.Port),
		User:  cfg.User, Database: cfg.Database, LoginHint: "pg_hba.conf", RawURL: s.rawURL,
	}
}

// connFailure reports whether err means the database could not be reached
// or refused the login, as opposed to a statement it rejected, and which.
// Login failures are server errors too, but they arrive wrapped in a
// ConnectError.
func connFailure(err error) (driverkit.ConnFailure, bool) {
	var (
		connErr *pgconn.ConnectError
		pgErr   *pgconn.PgError
	)
	switch {
	case err == nil:
		return driverkit.CannotReach, false
	case !errors.As(err, &connErr) && errors.As(err, &pgErr):
		return driverkit.CannotReach, false
	case errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "28"): // invalid authorization
		return driverkit.LoginRefused, true
	case errors.As(err, &pgErr) && pgErr.Code == "3D000": // invalid_catalog_name
		return driverkit.NoDatabase, true
	}
	return driverkit.CannotReach, true
}

// Listen waits on a connection of its own for notifications on the table's
// channel, which the schema's trigger sends when a transaction inserts
// events, and calls onNotify for each. It calls onNotify once as soon as it
// listens, because events may have been committed while no one was
// listening. Two-phase transactions cannot notify: while the server can
// prepare them, it also calls onNotify when one it saw prepared ends
// (preparedWatch). It returns nil when ctx ends and an error when the
// connection fails; the caller reconnects.
func (s *Store) Listen(ctx context.Context, onNotify func()) error {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return s.queryError("listen on", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	var channel string
	if err := conn.QueryRow(ctx, s.queries["channel"], s.table.Quoted()).Scan(&channel); err != nil {
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, pgx.ErrNoRows):
			return s.tableMissing("listen")
		}
		return s.queryError("find the notify channel of", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return s.queryError("listen on", err)
	}
	// The first look comes before the first onNotify, so that a
	// transaction prepared by then is watched from the start.
	var prepared preparedWatch
	if _, canPrepare, err := prepared.look(ctx, s); canPrepare || err != nil {
		watching, stopWatching := context.WithCancel(ctx)
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			prepared.watch(watching, s, onNotify)
		}()
		defer func() { stopWatching(); <-watched }()
	}
	onNotify()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("wait for notifications on %s: %w", s.table, err)
		}
		onNotify()
	}
}
