// Package inbox is the consumer's half of the outbox pattern: it makes each
// event's effect happen once, although the relay and the brokers deliver
// at least once.
//
// A consumer applies an event inside a database transaction that also
// records (consumer, event id) in an inbox table. The record's primary key
// turns a second delivery of the same event into a no-op, and because the
// record commits or rolls back with the effect, an event is marked done
// exactly when its effect is stored:
//
//	applied, err := inbox.Process(ctx, db, "billing", id, func(tx *sql.Tx) error {
//		return charge(ctx, tx, order) // the effect, in the same transaction
//	})
//	// err == nil: ack the message (applied is false for a duplicate);
//	// err != nil: nothing was committed, let the broker redeliver it.
//
// Process works with database/sql on PostgreSQL (the pgx stdlib driver, or
// any other) and on MySQL 8 and MariaDB 10.6+ (go-sql-driver/mysql);
// package inboxpgx does the same with pgx transactions. Package eventid
// reads the event id the relay put on a message, for every broker. The
// table is created by [Inbox.CreateTable] or `relay-cli migrate --inbox`,
// and old records are deleted by [Inbox.Prune] or `relay-cli inbox prune`.
//
// The package imports no database driver: the caller's *sql.DB brings its
// own, and [Config.Dialect] says which SQL it speaks.
package inbox

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	schema "github.com/outbox-relay/relay/schema/postgres"
)

// TableDefault is the inbox table's name when Config.Table is empty.
const TableDefault = "inbox"

// MaxIDLen is the longest consumer name or event id, in bytes, that fits
// the table's key: the relay's ids are 36-byte UUIDs, and 255 bytes leave
// room for any other producer's.
const MaxIDLen = 255

// Dialect is the SQL a database speaks.
type Dialect int

const (
	// Postgres is PostgreSQL 13 or later. It is the zero Dialect.
	Postgres Dialect = iota
	// MySQL is MySQL 8 or MariaDB 10.6 or later.
	MySQL
)

// ParseDialect reads a dialect by name, "postgres" or "mysql", as
// storage.SQLDatabase names them.
func ParseDialect(name string) (Dialect, error) {
	switch name {
	case "postgres":
		return Postgres, nil
	case "mysql":
		return MySQL, nil
	}
	return 0, fmt.Errorf("inbox: unknown SQL dialect %q (postgres, mysql)", name)
}

func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "postgres"
	case MySQL:
		return "mysql"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// Config says where the inbox lives. The zero Config is the table "inbox"
// on PostgreSQL.
type Config struct {
	// Dialect is the database's SQL: Postgres (the default) or MySQL. It is
	// stated rather than guessed from the *sql.DB's driver because a guess
	// would have to know every driver and wrapper (otelsql, sqlmock…) by
	// its Go type, or ask the server on first use; a wrong guess would turn
	// every event into a syntax error.
	Dialect Dialect
	// Table is the inbox table, "table" or "schema.table" (on MySQL,
	// "database.table"): lowercase letters, digits and underscores, at
	// most 45 characters a part. Empty means TableDefault.
	Table string
}

// Validate reports a Config that New would refuse, and why.
func (c Config) Validate() error {
	if c.Dialect != Postgres && c.Dialect != MySQL {
		return fmt.Errorf("inbox: unknown dialect %d: use inbox.Postgres or inbox.MySQL", int(c.Dialect))
	}
	if c.Table != "" {
		if _, err := schema.ParseTable(c.Table); err != nil {
			return fmt.Errorf("inbox: %w", err)
		}
	}
	return nil
}

// Errors a caller can tell apart with errors.Is.
var (
	// ErrInvalidID means the consumer name or event id cannot be recorded:
	// empty, longer than MaxIDLen, not UTF-8 or holding a NUL byte.
	// Redelivering the message will not change it, so terminate it (or
	// send it to a dead-letter queue) rather than retrying.
	ErrInvalidID = errors.New("inbox: invalid consumer or event id")
	// ErrTableMissing means the inbox table does not exist.
	ErrTableMissing = errors.New("inbox table does not exist")
)

// Inbox is one inbox table in one dialect. It holds no connection and is
// safe for concurrent use.
type Inbox struct {
	dialect Dialect
	table   schema.Table
	queries map[string]string
	// ddl is the schema as SchemaSQL prints it: create_index, then
	// create_table, comments kept.
	ddl []string
}

//go:embed sql
var sqlFiles embed.FS

// New returns the inbox cfg describes.
func New(cfg Config) (*Inbox, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	name := cfg.Table
	if name == "" {
		name = TableDefault
	}
	table, _ := schema.ParseTable(name) // checked by Validate
	b := &Inbox{dialect: cfg.Dialect, table: table}
	dir := "sql/" + cfg.Dialect.String()
	entries, err := sqlFiles.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	b.queries = make(map[string]string, len(entries)+2)
	for _, e := range entries {
		text, err := sqlFiles.ReadFile(dir + "/" + e.Name())
		if err != nil {
			return nil, err
		}
		name := strings.TrimSuffix(e.Name(), ".sql")
		b.queries[name] = b.expand(string(text))
		if strings.HasPrefix(name, "create_") {
			b.ddl = append(b.ddl, b.expandWithComments(string(text)))
		}
	}
	// Pruning one consumer's records or everyone's are different
	// statements rather than a parameter that may be empty, so each gets
	// a plan of its own.
	for _, q := range []string{"prune", "prune_count"} {
		filter := "AND consumer = ?"
		if cfg.Dialect == Postgres {
			filter = "AND consumer = $3"
			if q == "prune_count" {
				filter = "AND consumer = $2"
			}
		}
		text := b.queries[q]
		b.queries[q] = strings.ReplaceAll(text, "{{consumer_filter}}", "")
		b.queries[q+"_consumer"] = strings.ReplaceAll(text, "{{consumer_filter}}", filter)
	}
	return b, nil
}

// expand fills the table's names into a statement and drops its leading
// comment: go-sql-driver/mysql counts every ? in a statement, comments
// included, when it interpolates arguments.
func (b *Inbox) expand(text string) string {
	var body []string
	for _, line := range strings.Split(text, "\n") {
		if len(body) == 0 && strings.HasPrefix(line, "--") {
			continue
		}
		body = append(body, line)
	}
	return b.expandWithComments(strings.Join(body, "\n"))
}

func (b *Inbox) expandWithComments(text string) string {
	return strings.NewReplacer(
		"{{table}}", b.quote(b.table.Schema, b.table.Name),
		"{{index}}", b.quote("", b.indexName()),
	).Replace(strings.TrimSpace(text))
}

// quote quotes an optionally qualified name for the dialect. Names are
// validated identifiers, so quoting only keeps reserved words usable.
func (b *Inbox) quote(qualifier, name string) string {
	q := `"`
	if b.dialect == MySQL {
		q = "`"
	}
	if qualifier == "" {
		return q + name + q
	}
	return q + qualifier + q + "." + q + name + q
}

func (b *Inbox) indexName() string { return b.table.Name + "_processed_at_idx" }

// Table returns the table's name as configured, table or schema.table.
func (b *Inbox) Table() string { return b.table.String() }

// Dialect returns the SQL the inbox speaks.
func (b *Inbox) Dialect() Dialect { return b.dialect }

// Beginner starts transactions: *sql.DB and *sql.Conn are Beginners.
type Beginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// Execer runs a statement in a transaction: *sql.Tx is an Execer, and
// inboxpgx adapts a pgx.Tx.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// defaultInbox is the table "inbox" on PostgreSQL, for the package-level
// functions.
var defaultInbox, _ = New(Config{})

// Default returns the inbox the package-level functions use: the table
// "inbox" on PostgreSQL.
func Default() *Inbox { return defaultInbox }

// Process applies an event once, with the table "inbox" on PostgreSQL; see
// [Inbox.Process].
func Process(ctx context.Context, db Beginner, consumer, eventID string, fn func(tx *sql.Tx) error) (applied bool, err error) {
	return defaultInbox.Process(ctx, db, consumer, eventID, fn)
}

// Record records an event in a transaction of the caller's, with the table
// "inbox" on PostgreSQL; see [Inbox.Record].
func Record(ctx context.Context, tx Execer, consumer, eventID string) (fresh bool, err error) {
	return defaultInbox.Record(ctx, tx, consumer, eventID)
}

// Process runs fn, the event's effect, in a new transaction of db that
// also records eventID for consumer, and commits both together:
//
//   - a new event: fn runs; if it returns nil, the record and fn's changes
//     commit and Process returns (true, nil);
//   - an event this consumer already applied: fn does not run, nothing is
//     written, and Process returns (false, nil) — ack the message;
//   - fn's error: everything rolls back, the record too, and Process
//     returns that error unchanged, so a redelivery applies the event;
//   - a failure to begin, record or commit: an error, and nothing is
//     committed.
//
// So the caller acks when err is nil, whatever applied says, and lets the
// broker redeliver otherwise. A transaction that recorded the same event
// and has not ended yet makes Process wait for it, so a duplicate is
// reported only for an event whose effect committed. On MySQL, when such
// a transaction rolls back while several others wait for it, InnoDB may
// end all but one of them with a deadlock error: nothing was committed,
// and the redelivery applies the event.
//
// The transaction uses the database's default isolation level. fn must
// not commit or roll back tx. Consumers that process several events in one
// transaction call Record instead.
func (b *Inbox) Process(ctx context.Context, db Beginner, consumer, eventID string, fn func(tx *sql.Tx) error) (applied bool, err error) {
	if err := checkIDs(consumer, eventID); err != nil {
		return false, err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("inbox: begin transaction for event %s: %w", eventID, err)
	}
	// Rolls back on every way out but a commit, a panic in fn included.
	defer func() {
		if !applied {
			_ = tx.Rollback()
		}
	}()
	fresh, err := b.record(ctx, tx, consumer, eventID)
	if err != nil || !fresh {
		return false, err
	}
	if err := fn(tx); err != nil {
		return false, err
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("inbox: commit event %s for consumer %q: %w", eventID, consumer, err)
	}
	return true, nil
}

// Record inserts (consumer, eventID) into the inbox within tx, a
// transaction of the caller's, and reports whether the event is new to
// this consumer. When it is, the caller applies the event in tx and
// commits; when it is not, the caller skips it. Should the caller's work
// fail, rolling tx back removes the record too, so a redelivery applies
// the event. Like Process, it waits for a transaction that recorded the
// same event and is still open.
func (b *Inbox) Record(ctx context.Context, tx Execer, consumer, eventID string) (fresh bool, err error) {
	if err := checkIDs(consumer, eventID); err != nil {
		return false, err
	}
	return b.record(ctx, tx, consumer, eventID)
}

func (b *Inbox) record(ctx context.Context, tx Execer, consumer, eventID string) (bool, error) {
	res, err := tx.ExecContext(ctx, b.queries["record"], consumer, eventID)
	if err != nil {
		return false, fmt.Errorf("inbox: record event %s for consumer %q in %s (%s): %w", eventID, consumer, b.table, b.dialect, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("inbox: record event %s: rows affected: %w", eventID, err)
	}
	return n == 1, nil
}

// checkIDs refuses what the table cannot hold exactly, before the
// database sees it: on MySQL, INSERT IGNORE would truncate an overlong id
// with a mere warning, and two ids sharing their first 255 bytes would
// then be one event.
func checkIDs(consumer, eventID string) error {
	if err := checkID("consumer name", consumer); err != nil {
		return err
	}
	if eventID == "" {
		return fmt.Errorf("%w: the event id is empty; the message carries none (was it published by the relay?)", ErrInvalidID)
	}
	return checkID("event id", eventID)
}

func checkID(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: the %s is empty", ErrInvalidID, what)
	case len(s) > MaxIDLen:
		return fmt.Errorf("%w: the %s is %d bytes, at most %d fit", ErrInvalidID, what, len(s), MaxIDLen)
	case !utf8.ValidString(s) || strings.ContainsRune(s, 0):
		return fmt.Errorf("%w: the %s %q is not UTF-8 text without NUL bytes", ErrInvalidID, what, s)
	}
	return nil
}
