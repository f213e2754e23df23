// Package postgres is the PostgreSQL storage driver (pgx/v5). It claims and
// settles whole batches with one statement each, and guards every transition
// out of DELIVERING with the lease (relay id and locked_at) that claimed the
// row. Register it by importing the package; it serves postgres:// and
// postgresql:// URLs.
package postgres

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/redact"
	"github.com/outbox-relay/relay/pkg/storage"
	schema "github.com/outbox-relay/relay/schema/postgres"
)

func init() {
	storage.Register(storage.Driver{
		Name:         "PostgreSQL",
		DefaultTable: schema.DefaultTable,
		CheckTable: func(name string) error {
			_, err := schema.ParseTable(name)
			return err
		},
		Open: func(ctx context.Context, u *url.URL) (storage.Storage, error) {
			return Open(ctx, u.String())
		},
	}, "postgres", "postgresql")
}

// ConnectTimeoutDefault bounds connecting when neither the URL's
// connect_timeout nor PGCONNECT_TIMEOUT does.
const ConnectTimeoutDefault = 10 * time.Second

// PoolMaxConnsDefault sizes the pool when the URL sets no pool_max_conns:
// one claim, several settles in flight, the reaper and the stats reader.
const PoolMaxConnsDefault = 10

// DefaultPoolMaxConns is the former name of PoolMaxConnsDefault, from
// before defaults were all named XxxDefault.
//
// Deprecated: use PoolMaxConnsDefault.
const DefaultPoolMaxConns = PoolMaxConnsDefault

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

//go:embed sql/*.sql
var sqlFiles embed.FS

// Store is the PostgreSQL outbox table.
type Store struct {
	pool    *pgxpool.Pool
	table   schema.Table
	queries map[string]string
	writer  *Writer
	rawURL  string

	sqlOnce sync.Once
	sqlDB   *sql.DB

	// positions are the relays' claim positions (position.go).
	positions positions

	// partitionLockTimeout and partitionMoveLimit replace
	// PartitionLockTimeout and PartitionMoveLimit in tests.
	partitionLockTimeout time.Duration
	partitionMoveLimit   int64
}

var (
	_ storage.Storage     = (*Store)(nil)
	_ storage.Notifier    = (*Store)(nil)
	_ storage.SQLDatabase = (*Store)(nil)
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
	return &Store{pool: pool, table: table, queries: queries, writer: newWriter(table), rawURL: rawURL}, nil
}

func loadQueries(table schema.Table) (map[string]string, error) {
	entries, err := sqlFiles.ReadDir("sql")
	if err != nil {
		return nil, err
	}
	queries := make(map[string]string, len(entries))
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".sql")
		queries[name] = schema.Expand(mustReadSQL(name), table)
	}
	// Block mode stops a key at a DEAD event ahead of (or within) its run;
	// the conditions are part of the text, not parameters, so each mode
	// gets a plan of its own.
	ordered := queries["claim_ordered"]
	delete(queries, "claim_ordered")
	queries["claim_ordered_skip"] = strings.NewReplacer(
		"{{dead_holds_head}}", "",
		"{{no_dead_before_row}}", "true",
	).Replace(ordered)
	queries["claim_ordered_block"] = strings.NewReplacer(
		"{{dead_holds_head}}", "AND "+noDeadBefore(table, "h"),
		"{{no_dead_before_row}}", noDeadBefore(table, "run"),
	).Replace(ordered)
	return queries, nil
}

// mustReadSQL returns the embedded sql/<name>.sql, unexpanded. The files
// are part of the binary, so a missing one is a bug.
func mustReadSQL(name string) string {
	text, err := sqlFiles.ReadFile("sql/" + name + ".sql")
	if err != nil {
		panic(err)
	}
	return string(text)
}

// noDeadBefore is a condition, for block mode, that no DEAD event of key h.k
// comes before the row alias names.
func noDeadBefore(table schema.Table, alias string) string {
	return fmt.Sprintf(`NOT EXISTS (
          SELECT 1 FROM %[1]s d
          WHERE d.status = 'DEAD' AND d.partition_key COLLATE "C" = h.k
            AND d.seq < %[2]s.seq)`,
		table.Quoted(), alias)
}

// SQL returns a database/sql handle over the store's pool.
func (s *Store) SQL() (*sql.DB, string) {
	s.sqlOnce.Do(func() { s.sqlDB = stdlib.OpenDBFromPool(s.pool) })
	return s.sqlDB, "postgres"
}

// Table returns the table's name, as given (table or schema.table).
func (s *Store) Table() string { return s.table.String() }

// Describe says where the table is, without the password.
func (s *Store) Describe() string {
	cfg := s.pool.Config().ConnConfig
	return fmt.Sprintf("PostgreSQL at %s:%d database %q as user %q, table %s",
		cfg.Host, cfg.Port, cfg.Database, cfg.User, s.table)
}

// Pool exposes the connection pool, for tests and tools that need SQL the
// Store does not offer.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

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

// requiredColumns are the Open Outbox contract's columns.
var requiredColumns = []string{
	"event_id", "event_type", "partition_key", "payload", "headers", "status", "attempts",
	"last_error", "available_at", "locked_by", "locked_at", "delivered_at", "created_at", "updated_at",
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
		return fmt.Errorf("table %s: %w; run `relay-cli migrate` or start the relay with STORAGE_AUTO_MIGRATE=true",
			s.table, storage.ErrTableMissing)
	}
	var missing []string
	for _, c := range append(slices.Clone(requiredColumns), "seq") {
		if !slices.Contains(have, c) {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("table %s lacks column(s) %s; run `relay-cli migrate` to add what the relay adds (seq), or check that STORAGE_TABLE_NAME names an outbox table",
			s.table, strings.Join(missing, ", "))
	}
	return nil
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
	if isConnectionError(err) {
		return s.connError(err)
	}
	return fmt.Errorf("%s %s: %w", what, s.table, err)
}

// connError explains a failure to reach the database or to log in, without
// the password and without the table, which is not the problem.
func (s *Store) connError(err error) error {
	cfg := s.pool.Config().ConnConfig
	where := fmt.Sprintf("PostgreSQL at %s:%d", cfg.Host, cfg.Port)
	var pgErr *pgconn.PgError
	var msg string
	switch {
	case errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "28"): // invalid authorization
		msg = fmt.Sprintf("%s refused the login of user %q (check the user and password in STORAGE_URL, and pg_hba.conf)",
			where, cfg.User)
	case errors.As(err, &pgErr) && pgErr.Code == "3D000": // invalid_catalog_name
		msg = fmt.Sprintf("%s has no database %q (check the database name in STORAGE_URL, or create it)",
			where, cfg.Database)
	default:
		msg = fmt.Sprintf("cannot reach %s as user %q (check STORAGE_URL and that the server is running)",
			where, cfg.User)
	}
	return storage.Unreachable(fmt.Errorf("%s: %s", msg, redact.Error(err, s.rawURL)))
}

// Claim moves up to p.Limit due rows to DELIVERING and returns them in
// write order (seq), so that events sharing a partition key are published
// in the order they were written. Unordered claims go forward from the
// relay's claim position (position.go).
//
// The claim goes out as one pipeline, which PostgreSQL runs as one implicit
// transaction in one round trip: for ordered claims first a per-table
// advisory lock, for unordered ones the planner settings of claim_plan.sql;
// then the lease stamp (the transaction's now()) with the snapshot's
// transaction ids, then the claiming statement. Knowing the stamp before reading the rows lets a claim
// whose rows cannot be read in full hand them back at once.
func (s *Store) Claim(ctx context.Context, p storage.ClaimParams) (storage.Batch, error) {
	b := &pgx.Batch{}
	claim := s.queries["claim"]
	var (
		pos *position
		pl  plan
	)
	if p.Ordering == storage.OrderingPartition {
		// Ordered claims take turns: the claim statement's snapshot is
		// taken after the lock is held, so it sees every run another
		// relay claimed and cannot take a later part of it.
		b.Queue(s.queries["claim_lock"], claimLockClass, s.table.Quoted())
		b.Queue(s.queries["claim_stamp"])
		claim = s.queries["claim_ordered_skip"]
		if p.OnDead == storage.DeadBlock {
			claim = s.queries["claim_ordered_block"]
		}
		b.Queue(claim, p.RelayID, p.Limit, p.After, p.MaxBytes)
	} else {
		// One relay's claims come one after another; the position is
		// held for the claim's round trip.
		pos = s.positions.of(p.RelayID)
		pos.mu.Lock()
		defer pos.mu.Unlock()
		pl = pos.next(p.Limit, p.SweepInterval, time.Now())
		b.Queue(s.queries["claim_plan"])
		b.Queue(s.queries["claim_stamp"])
		b.Queue(claim, p.RelayID, p.Limit, p.MaxBytes, pl.floor)
	}

	results := s.pool.SendBatch(ctx, b)
	// Closed once only: after an error, pgx's Close touches the
	// connection's statement cache even when called again, by which time
	// the connection is back in the pool and may serve another goroutine.
	closed := false
	closeResults := func() error {
		if closed {
			return nil
		}
		closed = true
		return results.Close()
	}
	defer func() { _ = closeResults() }()
	if p.Ordering == storage.OrderingPartition {
		if _, err := results.Exec(); err != nil {
			s.recycle(err)
			return storage.Batch{}, fmt.Errorf("claim batch: lock: %w", err)
		}
	} else if _, err := results.Exec(); err != nil {
		s.recycle(err)
		return storage.Batch{}, fmt.Errorf("claim batch: plan: %w", err)
	}
	lease := storage.Lease{RelayID: p.RelayID}
	var xmin, xmax uint64
	if err := results.QueryRow().Scan(&lease.LockedAt, &xmin, &xmax); err != nil {
		s.recycle(err)
		return storage.Batch{}, fmt.Errorf("claim batch: %w", err)
	}
	events, lowest, highest, err := readEvents(results, p.Limit)
	if err == nil {
		err = closeResults()
	}
	if err != nil {
		// The claim's connection goes back to the pool first: on a pool of
		// one, handing back would otherwise wait for it until it timed out.
		_ = closeResults()
		claimErr := fmt.Errorf("claim batch: %w", err)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			// The server refused the claim, so the pipeline's implicit
			// transaction rolled back and no row is leased: nothing to hand
			// back, and a hand-back failing for the same reason would only
			// blur the error.
			s.recycle(err)
			return storage.Batch{}, claimErr
		}
		return storage.Batch{}, s.handBack(ctx, lease, claimErr)
	}
	if pos != nil {
		pos.done(pl, xmin, xmax, lowest, highest, time.Now())
	}
	lease.CreatedFrom, lease.CreatedTo = createdRange(events)
	return storage.Batch{Lease: lease, Events: events}, nil
}

// createdRange bounds the events' created_at; zero when an event's is
// unknown (±infinity reads as zero) or there are none.
func createdRange(events []outbox.Event) (from, to time.Time) {
	for i, e := range events {
		if e.CreatedAt.IsZero() {
			return time.Time{}, time.Time{}
		}
		if i == 0 || e.CreatedAt.Before(from) {
			from = e.CreatedAt
		}
		if i == 0 || e.CreatedAt.After(to) {
			to = e.CreatedAt
		}
	}
	return from, to
}

// createdFrom and createdTo are a lease's created_at bounds for the settle
// statements: -infinity and infinity when unknown, so that every row
// matches.
func createdFrom(l storage.Lease) pgtype.Timestamptz {
	if l.CreatedFrom.IsZero() || l.CreatedTo.IsZero() {
		return pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	}
	return pgtype.Timestamptz{Time: l.CreatedFrom, Valid: true}
}

func createdTo(l storage.Lease) pgtype.Timestamptz {
	if l.CreatedFrom.IsZero() || l.CreatedTo.IsZero() {
		return pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true}
	}
	return pgtype.Timestamptz{Time: l.CreatedTo, Valid: true}
}

// handBack releases every row of a claim that failed after the claiming
// statement may have committed, and returns the claim's error with what
// became of them.
func (s *Store) handBack(ctx context.Context, lease storage.Lease, claimErr error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), handBackTimeout)
	defer cancel()
	tag, err := s.pool.Exec(ctx, s.queries["release_lease"], lease.RelayID, lease.LockedAt)
	if err != nil {
		s.recycle(err)
		return fmt.Errorf("%w (handing its rows back failed too, the reaper will take them back: %v)", claimErr, err)
	}
	if n := tag.RowsAffected(); n > 0 {
		return fmt.Errorf("%w (its %d rows were handed back)", claimErr, n)
	}
	return claimErr
}

// handBackTimeout bounds handing back the rows of a failed claim.
const handBackTimeout = 5 * time.Second

// claimLockClass is the high half of the ordered-claim advisory lock key;
// the low half is the table's OID.
const claimLockClass = 0x6f72 // "or"

// readEvents reads the claimed rows, which the claim returns in write
// order, the lowest seq among those that were not PENDING again (0 for
// none: rows a sweep found behind the claim position) and the highest seq.
//
// It is on the hot path, and written to allocate per batch rather than per
// event: the columns are read without a copy (valid until the next row),
// payloads and headers copied into a few shared chunks, and repeated event
// types and keys share one string.
func readEvents(results pgx.BatchResults, limit int) (events []outbox.Event, lowest, highest int64, err error) {
	rows, err := results.Query()
	if err != nil {
		return nil, 0, 0, err
	}
	defer rows.Close()
	events = make([]outbox.Event, 0, limit)
	// Scanned into the same variables row after row: the addresses Scan
	// takes would otherwise move each row's Event to the heap.
	var (
		id                         [16]byte
		typ, key, payload, headers pgtype.DriverBytes
		attempts                   int
		createdAt                  pgtype.Timestamptz
		seq                        pgtype.Int8
		again                      pgtype.Bool
		arena                      byteArena
		strs                       = map[string]string{}
	)
	for rows.Next() {
		// The id as its 16 bytes: scanned as a uuid.UUID, pgx would go
		// through database/sql's Scanner and the id's text form.
		if err := rows.Scan(&id, &typ, &key, &payload, &headers, &attempts, &createdAt, &seq, &again); err != nil {
			return nil, 0, 0, fmt.Errorf("read row: %w", err)
		}
		if seq.Valid && !again.Bool && (lowest == 0 || seq.Int64 < lowest) {
			lowest = seq.Int64
		}
		highest = max(highest, seq.Int64)
		e := outbox.Event{
			ID:           id,
			Type:         intern(strs, typ),
			PartitionKey: intern(strs, key),
			Payload:      arena.copy(payload),
			Headers:      arena.copy(headers),
			Attempts:     attempts,
		}
		if createdAt.Valid {
			e.CreatedAt = createdAt.Time
		}
		events = append(events, e)
	}
	return events, lowest, highest, rows.Err()
}

// intern returns b as a string, the same string for the same bytes.
func intern(strs map[string]string, b []byte) string {
	if s, ok := strs[string(b)]; ok { // no allocation for the lookup
		return s
	}
	s := string(b)
	strs[s] = s
	return s
}

// byteArena hands out copies of byte slices carved from shared chunks.
type byteArena struct{ chunk []byte }

// arenaChunk is the size of a chunk; a larger slice gets a chunk of its own.
const arenaChunk = 64 << 10

func (a *byteArena) copy(b []byte) []byte {
	if len(b) == 0 {
		return []byte{} // empty, not nil: a Kafka record tells them apart
	}
	if len(b) > cap(a.chunk)-len(a.chunk) {
		a.chunk = make([]byte, 0, max(arenaChunk, len(b)))
	}
	start := len(a.chunk)
	a.chunk = append(a.chunk, b...)
	// Capped, so that an append to one event's slice cannot run into the
	// next event's bytes.
	return a.chunk[start:len(a.chunk):len(a.chunk)]
}

// MarkDelivered moves the lease's rows among p.IDs to DELIVERED.
func (s *Store) MarkDelivered(ctx context.Context, p storage.SettleParams) (int, error) {
	tag, err := s.pool.Exec(ctx, s.queries["mark_delivered"], p.Lease.RelayID, p.Lease.Stamps(), uuidArray(p.IDs),
		createdFrom(p.Lease), createdTo(p.Lease))
	if err != nil {
		s.recycle(err)
		return 0, fmt.Errorf("mark delivered: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// DeleteDelivered deletes the lease's rows among p.IDs.
func (s *Store) DeleteDelivered(ctx context.Context, p storage.SettleParams) (int, error) {
	tag, err := s.pool.Exec(ctx, s.queries["delete_delivered"], p.Lease.RelayID, p.Lease.Stamps(), uuidArray(p.IDs),
		createdFrom(p.Lease), createdTo(p.Lease))
	if err != nil {
		s.recycle(err)
		return 0, fmt.Errorf("delete delivered: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// MarkFailed records one failed attempt for each of the lease's rows in
// p.Failures.
func (s *Store) MarkFailed(ctx context.Context, p storage.FailParams) (int, error) {
	n := len(p.Failures)
	ids := make([][16]byte, n)
	msgs := make([]string, n)
	dead := make([]bool, n)
	delays := make([]int64, n)
	for i, f := range p.Failures {
		ids[i], msgs[i], dead[i], delays[i] = f.ID, storage.StorableError(f.Error), f.Dead, f.Delay.Microseconds()
	}
	tag, err := s.pool.Exec(ctx, s.queries["mark_failed"], p.Lease.RelayID, p.Lease.Stamps(), ids, msgs, dead, delays,
		createdFrom(p.Lease), createdTo(p.Lease))
	if err != nil {
		s.recycle(err)
		return 0, fmt.Errorf("mark failed: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// Release returns the lease's rows among p.IDs to PENDING, attempts unchanged.
func (s *Store) Release(ctx context.Context, p storage.SettleParams) (int, error) {
	tag, err := s.pool.Exec(ctx, s.queries["release"], p.Lease.RelayID, p.Lease.Stamps(), uuidArray(p.IDs),
		createdFrom(p.Lease), createdTo(p.Lease))
	if err != nil {
		s.recycle(err)
		return 0, fmt.Errorf("release: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// Renew moves the lease's rows among p.IDs to the stamp p.To.
func (s *Store) Renew(ctx context.Context, p storage.RenewParams) (int, error) {
	tag, err := s.pool.Exec(ctx, s.queries["renew"], p.Lease.RelayID, p.Lease.Stamps(), uuidArray(p.IDs), p.To,
		createdFrom(p.Lease), createdTo(p.Lease))
	if err != nil {
		s.recycle(err)
		return 0, fmt.Errorf("renew lease: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// Reap takes back at most p.Limit leases older than p.LeaseTimeout.
func (s *Store) Reap(ctx context.Context, p storage.ReapParams) (storage.ReapResult, error) {
	var r storage.ReapResult
	err := s.pool.QueryRow(ctx, s.queries["reap"], p.LeaseTimeout.Microseconds(), p.Limit, p.MaxAttempts).
		Scan(&r.Requeued, &r.Dead)
	if err != nil {
		s.recycle(err)
		return r, fmt.Errorf("reap expired leases: %w", err)
	}
	return r, nil
}

// uuidArray passes ids to PostgreSQL as 16-byte values. As []uuid.UUID,
// pgx would encode each through database/sql's Valuer: formatted as text,
// parsed back, and planned anew for every element.
func uuidArray(ids []uuid.UUID) [][16]byte {
	out := make([][16]byte, len(ids))
	for i, id := range ids {
		out[i] = id
	}
	return out
}

// isConnectionError reports whether err means the database could not be
// reached or refused the login, as opposed to a statement it rejected.
// Login failures are server errors too, but they arrive wrapped in a
// ConnectError.
func isConnectionError(err error) bool {
	if err == nil {
		return false
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		return true
	}
	var pgErr *pgconn.PgError
	return !errors.As(err, &pgErr)
}

// Listen waits on a connection of its own for notifications on the table's
// channel, which the schema's trigger sends when a transaction inserts
// events, and calls onNotify for each. It calls onNotify once as soon as it
// listens, because events may have been committed while no one was
// listening. It returns nil when ctx ends and an error when the connection
// fails; the caller reconnects.
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
			return fmt.Errorf("listen on table %s: %w", s.table, storage.ErrTableMissing)
		}
		return s.queryError("find the notify channel of", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return s.queryError("listen on", err)
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
