package driverkit

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/outbox-relay/relay/internal/redact"
	"github.com/outbox-relay/relay/pkg/storage"
)

// What every driver does the same way: reading its SQL files, checking
// the table's columns, explaining a database it cannot reach. Drivers
// call these so that the wording, and the rules behind it, are written
// once.

// LoadQueries reads every dir/*.sql file of fsys (a driver's embedded SQL),
// keyed by its name without ".sql", each passed through expand, which
// fills in the table's name (and whatever else the driver's files leave
// open).
func LoadQueries(fsys fs.FS, dir string, expand func(query string) string) (map[string]string, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	queries := make(map[string]string, len(entries))
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".sql")
		if !ok {
			continue
		}
		queries[name] = expand(MustReadQuery(fsys, path.Join(dir, e.Name())))
	}
	return queries, nil
}

// MustReadQuery returns the SQL file at name in fsys, unexpanded. A
// driver's SQL files are embedded in the binary, so a missing one is a bug.
func MustReadQuery(fsys fs.FS, name string) string {
	text, err := fs.ReadFile(fsys, name)
	if err != nil {
		panic(err)
	}
	return string(text)
}

// ContractColumns are the Open Outbox table contract's columns: every
// driver's Check requires them.
var ContractColumns = []string{
	"event_id", "event_type", "partition_key", "payload", "headers", "status", "attempts",
	"last_error", "available_at", "locked_by", "locked_at", "delivered_at", "created_at", "updated_at",
}

// CheckColumns is Check's verdict on a table that exists with the columns
// have (lower case): an error naming what it lacks of ContractColumns and
// of added, the columns the driver's migration adds to the contract's
// table (seq, …), or nil.
func CheckColumns(table, where string, have []string, added ...string) error {
	var missing []string
	for _, c := range append(slices.Clone(ContractColumns), added...) {
		if !slices.Contains(have, c) {
			missing = append(missing, c)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("table %s in %s lacks column(s) %s; run `relay-cli migrate` to add what the relay adds (%s), or check that STORAGE_TABLE_NAME names an outbox table",
		table, where, strings.Join(missing, ", "), strings.Join(added, ", "))
}

// ConnFailure is why a database could not be reached or would not let the
// relay in, as ConnError reports it.
type ConnFailure int

// Connection failures.
const (
	// CannotReach: no answer, or any failure not listed below.
	CannotReach ConnFailure = iota
	// LoginRefused: the server refused the user's login.
	LoginRefused
	// NoDatabase: the server has no database of the URL's name.
	NoDatabase
	// DatabaseDenied: the user may not use the database.
	DatabaseDenied
)

// Server names the database a driver connects to, for ConnError.
type Server struct {
	// Where is the server, for people: "PostgreSQL at db:5432".
	Where          string
	User, Database string
	// LoginHint is where else than the user and password to look when
	// the login is refused: "pg_hba.conf".
	LoginHint string
	// RawURL is the storage URL, whose password ConnError keeps out of
	// its message.
	RawURL string
}

// Location is the server and the database, as errors name where they
// looked: "PostgreSQL at db:5432 database "app"".
func (s Server) Location() string { return fmt.Sprintf("%s database %q", s.Where, s.Database) }

// QueryError explains err, from a statement run on table while doing what:
// a cancelled context (Ctrl-C, SIGTERM) as an interruption, a database
// that could not be reached or refused the login (classify says whether it
// is one, and which) as ConnError does, anything else as the statement's
// error. A cancelled connection attempt is no unreachable server: telling
// the operator who pressed Ctrl-C to check that the server is running
// sends them to the wrong place.
func QueryError(srv Server, table, what string, err error, classify func(error) (ConnFailure, bool)) error {
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("interrupted: %s %s in %s: %w", what, table, srv.Location(), redacted{redact.Error(err, srv.RawURL), err})
	}
	if why, ok := classify(err); ok {
		return ConnError(srv, why, err)
	}
	return fmt.Errorf("%s %s: %w", what, table, err)
}

// redacted is err with msg, err's text without the password, for its text:
// errors.Is still finds context.Canceled in it.
type redacted struct {
	msg string
	err error
}

func (r redacted) Error() string { return r.msg }
func (r redacted) Unwrap() error { return r.err }

// ConnError explains err, a failure to reach srv or to log in, with what
// to check: the same words from every driver, without the password and
// without the table, which is not the problem. It is marked
// storage.Unreachable.
func ConnError(srv Server, why ConnFailure, err error) error {
	var msg string
	switch why {
	case LoginRefused:
		msg = fmt.Sprintf("%s refused the login of user %q (check the user and password in STORAGE_URL, and %s)",
			srv.Location(), srv.User, srv.LoginHint)
	case NoDatabase:
		msg = fmt.Sprintf("%s has no database %q (check the database name in STORAGE_URL, or create it)",
			srv.Where, srv.Database)
	case DatabaseDenied:
		msg = fmt.Sprintf("%s does not let user %q use database %q (check the database name in STORAGE_URL, or grant the user access)",
			srv.Where, srv.User, srv.Database)
	default:
		msg = fmt.Sprintf("cannot reach %s as user %q (check STORAGE_URL and that the server is running)",
			srv.Location(), srv.User)
	}
	return storage.Unreachable(fmt.Errorf("%s: %s", msg, redact.Error(err, srv.RawURL)))
}

// WriterFor is a driver's NewWriter: the writer newWriter makes for the
// table name, once the driver's parseTable accepts it.
func WriterFor[T, W any](name string, parseTable func(string) (T, error), newWriter func(T) W) (W, error) {
	t, err := parseTable(name)
	if err != nil {
		var none W
		return none, err
	}
	return newWriter(t), nil
}

// RunMigrate is the part of Migrate every driver shares. withLock runs its
// function while the driver holds its migration lock (on the connection or
// in the transaction C it passes, where the driver's statements run);
// objects lists the table's schema objects, and apply creates what is
// missing given what exists. The result compares the objects before and
// after.
func RunMigrate[C any](withLock func(fn func(C) error) error, objects func(C) ([]string, error),
	apply func(c C, existing []string) error) (storage.MigrateResult, error) {
	var res storage.MigrateResult
	err := withLock(func(c C) error {
		before, err := objects(c)
		if err != nil {
			return err
		}
		if err := apply(c, before); err != nil {
			return err
		}
		after, err := objects(c)
		if err != nil {
			return err
		}
		res = storage.MigrateResult{}
		for _, obj := range after {
			if slices.Contains(before, obj) {
				res.Existed = append(res.Existed, obj)
			} else {
				res.Created = append(res.Created, obj)
			}
		}
		for _, obj := range before {
			if !slices.Contains(after, obj) {
				res.Dropped = append(res.Dropped, obj)
			}
		}
		return nil
	})
	return res, err
}

// MigrateLockRetries bounds how often RetryLocked runs a migration statement
// whose lock was not free in time; the pauses between grow from 100 ms to
// 5 s.
const MigrateLockRetries = 60

// RetryLocked runs a migration statement the way every driver does on a
// live table (docs/operations.md, "Upgrades"): run waits at most
// opts.LockTimeout (as the driver reckons it: timeout) for a lock writers
// would queue behind and returns an error for which notFree is true when
// it gave up; RetryLocked then pauses and runs it again, up to
// MigrateLockRetries times, saying so through opts.Progress. what names
// the statement; where says where to look for the transaction that holds
// the lock.
func RetryLocked(ctx context.Context, opts storage.MigrateOptions, timeout time.Duration, what, where string,
	notFree func(error) bool, run func() error) error {
	wait := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := run()
		if err == nil || !notFree(err) {
			return err
		}
		if attempt == MigrateLockRetries {
			return fmt.Errorf("%s: the table's lock was not free within %s in %d tries (a long transaction holds it: see %s), so nothing was changed; run migrate again later, or with a longer --lock-timeout: %w",
				what, timeout, attempt, where, err)
		}
		opts.Report("%s: the lock was not free within %s; trying again in %s (try %d of %d)", what, timeout, wait, attempt, MigrateLockRetries)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(wait*2, 5*time.Second)
	}
}

// ReportEvery calls report every interval until stop is called or ctx
// ends, for a long migration statement's progress; stop waits for a report
// under way.
func ReportEvery(ctx context.Context, every time.Duration, report func()) (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				report()
			}
		}
	}()
	return func() { close(done); <-finished }
}
