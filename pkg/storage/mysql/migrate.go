package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-relay/relay/internal/bytesize"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/driverkit"
	schema "github.com/outbox-relay/relay/schema/mysql"
)

// migrationLockWait is how long Migrate and ApplyGrants wait for another
// migration on the server to finish.
const migrationLockWait = 60 * time.Second

// SchemaSQL returns the DDL Migrate applies to a database without the
// table, for `relay-cli migrate --print`. (An existing table gets only what
// it lacks; see schema/mysql/upgrade.sql.)
func (s *Store) SchemaSQL() string { return schema.Render(s.table) }

// Migrate creates the table when it is missing, then adds whatever an
// existing table lacks (the seq column, state_at or its current
// expression, each index), and reports which objects it created and which
// already existed. MySQL commits each DDL statement by itself, so a
// migration is not one transaction; a named lock keeps two migrations from
// running at once, and every step checks first, so a migration cut short
// is finished by the next.
//
// On a live table: an index is built ALGORITHM=INPLACE, LOCK=NONE, which
// lets writers go on (a server that cannot build it so refuses rather than
// lock the table); the metadata lock each statement takes for a moment at
// its start and end is waited for at most opts.LockTimeout (rounded up to
// a second, MySQL's unit) and asked for again later, so writers never
// queue behind a migration that waits for a long transaction. A column's
// change rebuilds the table and blocks its writers throughout: refused
// unless opts.AllowBlocking. Indexes of earlier releases stay until
// opts.Cleanup.
func (s *Store) Migrate(ctx context.Context, opts storage.MigrateOptions) (storage.MigrateResult, error) {
	var size storage.MigrateResult
	var plan []storage.MigrateStep
	var kept []string
	withLock := func(fn func(*sql.Conn) error) error { return s.withMigrationLock(ctx, opts, fn) }
	objects := func(conn *sql.Conn) ([]string, error) { return s.schemaObjects(ctx, conn) }
	res, err := driverkit.RunMigrate(withLock, objects, func(conn *sql.Conn, before []string) error {
		var err error
		if size.TableBytes, size.TableRows, err = s.tableSize(ctx, conn); err != nil {
			return err
		}
		step := func(stmt string, blocks, why string) error {
			if opts.Plan {
				plan = append(plan, storage.MigrateStep{SQL: stmt, Blocks: blocks, Why: why})
				return nil
			}
			return s.migrateStep(ctx, conn, opts, stmt, why)
		}
		if !slices.Contains(before, "table "+s.table.Name) {
			for _, stmt := range schema.Statements(schema.Render(s.table)) {
				if err := step(stmt, "no", "create the table"); err != nil {
					return err
				}
			}
			if opts.Plan {
				return nil
			}
		}
		have, err := s.schemaObjects(ctx, conn)
		if err != nil {
			return err
		}
		for _, u := range schema.Upgrades(s.table) {
			if slices.Contains(have, u.Object) {
				continue
			}
			if u.Blocks && opts.Plan {
				if err := step(u.SQL, "yes", "add "+u.Object+": rebuilds the table, blocking its writers throughout (needs --allow-blocking)"); err != nil {
					return err
				}
				continue
			}
			if u.Blocks && !opts.AllowBlocking {
				return &blockingChange{fmt.Sprintf("adding %s rebuilds table %s (%s, about %d rows) and blocks its writers until it is done, "+
					"so migrate did not start it; stop the application's writes and run `relay-cli migrate --allow-blocking` in a maintenance window "+
					"(`relay-cli migrate --plan` lists what it would run)",
					u.Object, s.table, bytesize.Format(size.TableBytes), size.TableRows)}
			}
			blocks := "briefly"
			if u.Blocks {
				blocks = "yes"
			}
			if err := step(u.SQL, blocks, "add "+u.Object); err != nil {
				return fmt.Errorf("add %s: %w", u.Object, err)
			}
		}
		for _, name := range schema.Retired(s.table) {
			if !slices.Contains(have, "index "+name) {
				continue
			}
			if !opts.Cleanup {
				kept = append(kept, "index "+name)
				continue
			}
			if err := step(schema.DropIndexSQL(s.table, name), "briefly", "drop index "+name+" of an earlier release"); err != nil {
				return fmt.Errorf("drop %s: %w", name, err)
			}
		}
		return nil
	})
	res.Plan, res.Kept, res.TableBytes, res.TableRows = plan, kept, size.TableBytes, size.TableRows
	res.LockTimeout = lockWaitTimeout(opts)
	if opts.Plan {
		// Nothing ran: what exists is all there is.
		res.Existed, res.Created, res.Dropped = append(res.Existed, res.Created...), nil, nil
	}
	if _, ok := errors.AsType[*blockingChange](err); ok {
		return res, err
	}
	if err != nil {
		return res, s.queryError("migrate table", err)
	}
	return res, nil
}

// blockingChange is a migration refused because a change would block the
// table's writers throughout.
type blockingChange struct{ msg string }

func (e *blockingChange) Error() string { return e.msg }

// tableSize reads the table's size and estimated rows; -1 when it does not
// exist.
func (s *Store) tableSize(ctx context.Context, conn *sql.Conn) (bytes, rows int64, err error) {
	err = conn.QueryRowContext(ctx, `SELECT COALESCE(DATA_LENGTH + INDEX_LENGTH, 0), COALESCE(TABLE_ROWS, 0)
		FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?`, s.database, s.table.Name).Scan(&bytes, &rows)
	if errors.Is(err, sql.ErrNoRows) {
		return -1, -1, nil
	}
	return bytes, rows, err
}

// migrateStep runs one DDL statement, again while its metadata lock was
// not free within the lock timeout, and reports how long it took.
func (s *Store) migrateStep(ctx context.Context, conn *sql.Conn, opts storage.MigrateOptions, stmt, why string) error {
	start := time.Now()
	opts.Report("%s", why)
	lockNotFree := func(err error) bool {
		var myErr *mysql.MySQLError
		return errors.As(err, &myErr) && myErr.Number == errLockWaitTimeout
	}
	err := driverkit.RetryLocked(ctx, opts, lockWaitTimeout(opts), why, "information_schema.innodb_trx", lockNotFree, func() error {
		stop := s.watchAlter(ctx, conn, opts, why)
		defer stop()
		_, err := conn.ExecContext(ctx, stmt)
		return err
	})
	if err == nil {
		opts.Report("%s: done in %s", why, time.Since(start).Round(time.Millisecond))
	}
	return err
}

// lockWaitTimeout is opts' lock timeout in MySQL's unit, whole seconds,
// rounded up.
func lockWaitTimeout(opts storage.MigrateOptions) time.Duration {
	secs := (opts.LockTimeoutOrDefault() + time.Second - 1) / time.Second
	return max(secs, 1) * time.Second
}

// alterProgressEvery is how often a long DDL reports its progress.
var alterProgressEvery = 5 * time.Second

// watchAlter reports, every alterProgressEvery, how far the DDL running on
// conn has got, from performance_schema's stage events where the server
// records them (MySQL 8 does for InnoDB's ALTER TABLE by default); else
// only that it still runs.
func (s *Store) watchAlter(ctx context.Context, conn *sql.Conn, opts storage.MigrateOptions, why string) (stop func()) {
	if opts.Progress == nil {
		return func() {}
	}
	var id int64
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		return func() {}
	}
	start := time.Now()
	return driverkit.ReportEvery(ctx, alterProgressEvery, func() {
		var stage string
		var worked, estimated sql.NullInt64
		err := s.db.QueryRowContext(ctx, `SELECT e.EVENT_NAME, e.WORK_COMPLETED, e.WORK_ESTIMATED
			FROM performance_schema.events_stages_current e JOIN performance_schema.threads t ON t.THREAD_ID = e.THREAD_ID
			WHERE t.PROCESSLIST_ID = ?`, id).Scan(&stage, &worked, &estimated)
		switch {
		case err == nil && estimated.Int64 > 0:
			opts.Report("%s: %s, %d%% (%s)", why, stage, worked.Int64*100/estimated.Int64, time.Since(start).Round(time.Second))
		case err == nil:
			opts.Report("%s: %s (%s)", why, stage, time.Since(start).Round(time.Second))
		default:
			opts.Report("%s: still running (%s)", why, time.Since(start).Round(time.Second))
		}
	})
}

// withMigrationLock runs fn on a connection holding the server-wide
// migration lock, with a bounded wait for metadata locks.
func (s *Store) withMigrationLock(ctx context.Context, opts storage.MigrateOptions, fn func(*sql.Conn) error) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var locked sql.NullInt64
	if err := conn.QueryRowContext(ctx, s.queries["migrate_lock"], schema.MigrationLock,
		int(migrationLockWait/time.Second)).Scan(&locked); err != nil {
		return err
	}
	if locked.Int64 != 1 {
		return fmt.Errorf("another migration on this server held the lock %q for %s", schema.MigrationLock, migrationLockWait)
	}
	defer func() {
		bg := context.WithoutCancel(ctx)
		_, _ = conn.ExecContext(bg, s.queries["migrate_session_reset"])
		_, _ = conn.ExecContext(bg, s.queries["migrate_unlock"], schema.MigrationLock)
	}()
	if _, err := conn.ExecContext(ctx, s.queries["migrate_session"], int64(lockWaitTimeout(opts)/time.Second)); err != nil {
		return err
	}
	return fn(conn)
}

func (s *Store) schemaObjects(ctx context.Context, conn querier) ([]string, error) {
	rows, err := conn.QueryContext(ctx, s.queries["schema_objects"],
		s.database, s.table.Name, s.database, s.table.Name, s.database, s.table.Name, s.database, s.table.Name,
		s.database, s.table.LogLock().Name)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var objs []string
	for rows.Next() {
		var o string
		if err := rows.Scan(&o); err != nil {
			return nil, err
		}
		objs = append(objs, o)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows.Close()
	lockTable := s.table.LogLock().Name
	if slices.Contains(objs, "table "+lockTable) {
		// The row, which a statement can look for only where the table
		// exists. Unreadable (a relay's grants from before the table):
		// missing, which at worst has migrate insert it again, IGNOREd.
		var one int
		if err := conn.QueryRowContext(ctx, s.queries["log_lock_row"]).Scan(&one); err == nil {
			objs = append(objs, "row "+lockTable)
		}
	}
	slices.Sort(objs)
	return objs, nil
}

// GrantsSQL returns the least-privilege roles and grants for the table, for
// `relay-cli grants --print`.
func (s *Store) GrantsSQL() string { return schema.RenderGrants(s.table) }

// ApplyGrants creates the outbox_relay, outbox_producer and outbox_admin
// roles if missing and grants them what each needs on the table. It must
// run as an account that may create roles and grant on the table, after
// Migrate.
func (s *Store) ApplyGrants(ctx context.Context) error {
	err := s.withMigrationLock(ctx, storage.MigrateOptions{}, func(conn *sql.Conn) error {
		for _, stmt := range schema.Statements(s.GrantsSQL()) {
			if _, err := conn.ExecContext(ctx, stmt); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return s.queryError("grant roles on", err)
	}
	return nil
}
