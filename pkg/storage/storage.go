// Package storage is the boundary between the relay and the databases that
// hold outbox tables. It declares what each consumer needs as a small
// interface, and a registry from which a driver is chosen by the URL's
// scheme. Every query is one method taking a params struct, so new
// options do not change signatures. The interfaces:
//   - Storage: one table as a driver opens it, Queue, Reaper, Admin and
//     Schema at once;
//   - Queue: the engine's claims, settles and renewals;
//   - HeldQueue (optional): claims held in their open transaction, HeldTx;
//   - HeldTx: a held claim's transaction, which settles the batch;
//   - LogRecorder (optional): the settles of events read from the
//     database's log (CAPTURE=wal, CAPTURE=binlog);
//   - ClaimBounder (optional): how late a committed event may be claimed;
//   - Reaper: the reaper's taking back of expired leases;
//   - Notifier (optional): wakeups when events are inserted;
//   - DueWatcher (optional): wakeups when a scheduled or backed-off row
//     comes due;
//   - Admin: operators (relay-cli, the backlog gauges, the console);
//   - Schema: creating and checking the table;
//   - RetentionLocker (optional): one pruning process per table;
//   - Partitioner (optional): a time-partitioned table's partitions;
//   - PartitionMigrator (optional): creating the table partitioned;
//   - SQLDatabase (optional): the database/sql handle, for tables kept
//     beside the outbox (the inbox's relay-cli commands).
//
// Policy is decided here, once, and drivers apply it: the reap rule
// (ReapParams.DeadFrom), the ordered claim's run limit (ClaimParams.RunLimit)
// and every default (the params' WithDefaults), how listings filter
// (ListParams.Filters), prunes batch (driverkit.RunPrune), migrations
// report (driverkit.RunMigrate) and producers prepare events (Producer). A
// driver supplies statements and says how its database reports errors; it
// keeps no rules of its own. The helpers a driver applies them with, which
// only a driver's author needs, are in package driverkit.
//
// The rules every driver keeps are written on the methods below; the
// storagetest package checks them. Two apply throughout:
//   - Timestamps are kept and compared with microsecond precision. A lease
//     stamp the relay passes back (Lease.LockedAt, RenewParams.To) must match
//     the stored locked_at exactly when it is a value the driver returned or
//     stored, truncated to the microsecond.
//   - Partition keys compare bytewise (PostgreSQL's "C" collation, a
//     VARBINARY column on MySQL, whose binary collations pad with spaces),
//     the order of Go's string comparison: ordered claims walk keys in that
//     order and ClaimParams.After is compared in it.
package storage

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"time"

	"github.com/outbox-relay/relay/internal/registry"
)

// Queue is what the relay engine needs: claim batches and settle them.
// Every method that settles names the lease that claimed the rows and
// changes only rows still DELIVERING under that lease (locked_by and one of
// Lease.Stamps()), so a late answer from a relay whose lease was taken back
// changes nothing.
type Queue interface {
	// Claim moves up to Limit due PENDING rows to DELIVERING under a new
	// lease and returns them in the order they were written (the
	// insertion sequence, seq; created_at decides nothing). Nothing due:
	// an empty batch and no error. A row that cannot be read in full must
	// not fail the claim; and when the claim fails after rows were
	// leased, the driver hands them back before returning its error,
	// rather than leaving them for the reaper.
	//
	// A claim's cost must not grow with the events claimed before it:
	// while a long transaction holds back vacuum (or purge), every claimed
	// row leaves a dead version behind, and a claim that walks from the
	// start of the table steps over all of them. Drivers therefore claim
	// forward from where the relay's previous claims ended (a position
	// they keep per RelayID) and find rows handed back or retried where
	// those land. A position must never pass a row that may still become
	// claimable behind it: PostgreSQL's claims keep that by what snapshots
	// say of the writers' transaction ids (see "The claim frontier" in
	// docs/architecture.md), so that a due row is claimed by the first
	// claim after it is visible. Positions that cannot keep it (MySQL's
	// cursor) also look behind themselves at least every p.SweepInterval;
	// elsewhere that sweep is only a defence in depth.
	//
	// With p.Ordering partition, an event is claimed only when every
	// event written before it with its key (by seq) is DELIVERED, or DEAD
	// under p.OnDead skip; under block a DEAD event holds the rest of its
	// key. A key's events are claimed as a run from its first unfinished
	// one, in order, stopping at one that is not due, at p.RunLimit events
	// and at the batch's limits; a key with an event DELIVERING gives
	// none. Keys (NULL and "" are no key) are walked bytewise from just
	// after p.After to the end, then from the start up to p.After itself;
	// neither events without a key nor keyed ones crowd out the other. Claims on one table
	// take turns (a lock), so that two can never both see a key free. The
	// batch's After is the last key the walk took (p.After when none), for
	// the caller to pass back.
	//
	// p's zero fields mean their defaults: drivers start with
	// p.WithDefaults() and keep no defaults of their own.
	Claim(ctx context.Context, p ClaimParams) (Batch, error)
	// Settle writes the outcome of a batch the lease claimed, in one
	// call, and returns how many rows of each kind it changed. Delivered
	// rows go to DELIVERED, or with o.Delete are deleted
	// (DELIVERED_RETENTION=0: no DELIVERED row, no new row version and no
	// index entries to write). Failed rows count an attempt, attempts+1:
	// back to PENDING with available_at = now + Delay (by the database's
	// clock, to the microsecond), or DEAD (available_at unchanged), with
	// last_error set to StorableError(Error). Released rows go back to
	// PENDING without counting an attempt, due at once (a driver may set
	// available_at to the database's now, so that its claims find them
	// where they look for rows that became PENDING again). o.CreatedAt is
	// not read: the lease's created_at bounds serve instead.
	//
	// A driver may run a statement per kind, together (one transaction)
	// or one after another. Each changes only rows still DELIVERING under
	// the lease, and none leaves a row so, so a Settle run again — after
	// an error, or after a lost answer — changes no row a run before it
	// changed: a failure's attempt is never counted twice. On an error
	// the returned counts are those of the statements known to have
	// committed (none when they run in one transaction), so that a caller
	// that retries until the call lands adds the counts of its tries.
	Settle(ctx context.Context, lease Lease, o Outcome) (Settled, error)
	// Renew moves the lease's rows to the stamp p.To and returns how many
	// rows it covers now. Setting the same stamp twice is harmless, so a
	// renewal whose answer was lost can be repeated.
	Renew(ctx context.Context, p RenewParams) (int, error)
}

// HeldQueue is offered by a storage that can lease a batch by keeping its
// rows locked in the claim's open transaction while the batch is published
// (LEASE_MODE=lock), instead of moving them to DELIVERING and back: every
// delivered event then costs one new row version and its index entries, not
// two, and no lease is left for the reaper — when a relay dies its
// transaction ends, and its rows are PENDING as they were. No claim passes
// a row another transaction's lock kept from it (PostgreSQL's frontier
// stops before it), so the next claim after the transaction ended takes
// them; a relay that hangs keeps them until the database ends its idle
// transaction (ClaimHeld's idle). Unordered claims only: an ordered
// claim must see which keys are at the broker, which only DELIVERING rows
// show to other relays.
type HeldQueue interface {
	// ClaimHeld claims as Claim does, p.Ordering none, but leaves the rows
	// PENDING under the row locks of the returned transaction. The
	// database ends the transaction (rows as they were) once it has been
	// idle for longer than idle, which is how long a relay that hangs
	// keeps its batch. An empty batch holds no transaction.
	ClaimHeld(ctx context.Context, p ClaimParams, idle time.Duration) (HeldBatch, error)
	// SettleHeld writes a held batch's outcome after its transaction
	// ended without it (HeldTx.Settle failed): in a transaction of its own,
	// on rows still PENDING, so that delivered events are not delivered
	// again. It returns how many rows of each kind it changed (none on an
	// error). Unlike Queue.Settle it has no lease to guard a second run:
	// run again after a lost answer, it would count a failure's attempt
	// twice (a failed row is PENDING again).
	SettleHeld(ctx context.Context, lease Lease, o Outcome) (Settled, error)
}

// HeldBatch is a batch ClaimHeld took.
type HeldBatch struct {
	Batch
	// Tx holds the batch's rows; nil for an empty batch.
	Tx HeldTx
}

// HeldTx is the open transaction of a held claim. One goroutine at a time
// may call its methods.
type HeldTx interface {
	// Lease turns the batch into one leased by relayID, as Claim leases
	// its rows (DELIVERING under the returned lease's stamp), and
	// commits: the transaction, which holds vacuum's horizon back, ends,
	// and the batch goes on as a leased one (renewed, settled through
	// Queue). On an error the transaction has ended and the rows are
	// PENDING as they were.
	Lease(ctx context.Context, relayID string) (Lease, error)
	// Settle writes the batch's outcome and commits. On an error the
	// transaction has ended and wrote nothing: the rows are PENDING as
	// they were (SettleHeld may write the outcome anew).
	Settle(ctx context.Context, o Outcome) error
	// Abort ends the transaction, recording nothing.
	Abort()
}

// LogRecorder is offered by a storage whose database the relay can read
// through its log instead of claiming (CAPTURE=wal, PostgreSQL's
// write-ahead log). Events taken from the log are never claimed, so no
// lease guards them: a row is the log reader's while it is PENDING and
// fresh (available_at not after created_at). Every method changes only
// such rows, so a row that a claim took meanwhile — the backfill of rows
// written before the slot, a fallback to polling — is left to that claim,
// and one handed to the claims is never taken back.
type LogRecorder interface {
	// Record records the outcome of events read from the log, in one
	// call, and returns how many rows of each kind it changed: delivered
	// rows DELIVERED (deleted with o.Delete); failed ones as Queue.Settle
	// records them, a row PENDING again being due again (available_at
	// after created_at), which the claims find; released ones handed to
	// the claims untouched but for available_at, set to the database's
	// now: they become due again, and under ordering the claims deliver
	// them in their key's order. o.CreatedAt says where a partitioned
	// table keeps each row. No row it changes stays fresh, so a Record
	// run again changes none of them again; on an error the counts are,
	// as Queue.Settle's, those of the statements that did commit.
	Record(ctx context.Context, o Outcome) (Settled, error)
	// BlockedKeys returns, for each of p.Keys that has one, the lowest seq of
	// an event that blocks the key (its later events must wait for it):
	// one due again (PENDING, available_at after created_at), one
	// DELIVERING, or a DEAD one under p.OnDead block. A fresh PENDING row
	// blocks nothing — the log delivers it — unless the claims backfill it
	// (seq up to p.Backfill).
	BlockedKeys(ctx context.Context, p BlockedKeysParams) (map[string]int64, error)
	// Visible reports whether every transaction of ids (as the
	// database's log names them: capture.Txn.ID) is visible to new
	// snapshots: a log may send a transaction a moment before its rows
	// can be settled.
	Visible(ctx context.Context, ids []string) (bool, error)
	// FreshLeft reports whether a fresh PENDING row with seq up to upTo
	// is left: the backfill up to upTo is done when none is.
	FreshLeft(ctx context.Context, upTo int64) (bool, error)
	// LastSeq is the highest seq handed out so far (0: none); every row
	// written by a transaction that ended before the call has one at or
	// below it.
	LastSeq(ctx context.Context) (int64, error)
	// LockLog takes the table's log lock exclusively on a connection of
	// its own, waiting for the claims that hold it shared
	// (FreshEvents.WhenUnlocked) to end, and holds it until unlock is
	// called or the connection ends: while it is held, no claim takes a
	// fresh row past its relay's backfill.
	LockLog(ctx context.Context) (unlock func(), err error)
}

// Reaper is what the reaper needs.
type Reaper interface {
	// Reap takes back at most p.Limit leases older than p.LeaseTimeout by
	// the database's clock, oldest first, skipping rows another statement
	// has locked (so that reapers can run side by side): DEAD when the
	// row's attempts are at least p.DeadFrom() (the rule is ReapParams',
	// not the driver's), else PENDING and due now; either way attempts+1
	// and last_error "lease expired (relay <locked_by>)". It returns how
	// many rows went each way. Rows in other states are never touched,
	// whatever their locked_at.
	Reap(ctx context.Context, p ReapParams) (ReapResult, error)
}

// Notifier is offered by a storage that can tell the relay when events are
// inserted (PostgreSQL's LISTEN/NOTIFY). It is optional: the relay finds it
// at start with a type assertion and polls where it is missing.
type Notifier interface {
	// Listen calls onNotify once as soon as it listens and then for every
	// insert notification, until ctx ends (nil) or its connection fails
	// (an error; the caller calls it again).
	Listen(ctx context.Context, onNotify func()) error
}

// DueWatcher is offered by a storage that can tell the relay when its next
// scheduled or backed-off row comes due, so that the relay wakes for it
// instead of waiting out its poll (PostgreSQL, from due_at_idx). It is
// optional: the relay finds it at start with a type assertion and polls
// where it is missing.
type DueWatcher interface {
	// NextDue returns how long, by the database's clock, until the
	// earliest PENDING row that comes due after since (the database time,
	// now(), of the relay's last claim) comes due, and false when no such
	// row is known. A row due at or before since was that claim's to find;
	// one due after it but due already by now gives a wait of 0: it came
	// due between the claim and the question, and the claim never saw it
	// due. (Asking for rows due after now() alone lost exactly those,
	// until the next poll.) A relay therefore cannot spin: each claim
	// moves since past what it could take. The wait is a duration, not a
	// time, so that the relay waits it on its own monotonic clock and a
	// skew between the two clocks delays nothing. A driver may leave out
	// rows it cannot find cheaply (the relay's poll still finds them).
	NextDue(ctx context.Context, since time.Time) (wait time.Duration, ok bool, err error)
}

// SQLDatabase is offered by a storage that database/sql reaches. Tools that
// keep tables of their own next to the outbox — the consumer inbox's
// relay-cli commands — use it, so that they need no database client of
// their own.
type SQLDatabase interface {
	// SQL returns a database/sql handle on the storage's database, which
	// belongs to the storage (Close closes it), and the database's SQL
	// dialect: "postgres" or "mysql". It does not connect.
	SQL() (db *sql.DB, dialect string)
}

// Schema is what creating and checking the table needs.
type Schema interface {
	// Migrate creates the table, its indexes and whatever else the driver
	// needs, where missing; running it twice changes nothing. On a live
	// table no statement holds up the application's writes for longer
	// than opts.LockTimeout at a time (docs/operations.md, "Upgrades").
	// driverkit.RunMigrate tells what was created from what existed.
	Migrate(ctx context.Context, opts MigrateOptions) (MigrateResult, error)
	// Check verifies that the database answers and the table is usable. A
	// missing table is an error wrapping ErrTableMissing; a table without
	// every column of driverkit.ContractColumns, and of those the driver
	// adds, is driverkit.CheckColumns' error; a database that cannot be
	// reached or refuses the login wraps ErrUnreachable
	// (driverkit.ConnError) and does not mention the table.
	Check(ctx context.Context) error
	// SchemaSQL is the DDL Migrate applies, for teams that run migrations
	// with their own tools.
	SchemaSQL() string
	// GrantsSQL is the least-privilege users or roles for the relay,
	// producers and operators, and their grants on the table.
	GrantsSQL() string
	// ApplyGrants runs GrantsSQL.
	ApplyGrants(ctx context.Context) error
}

// Storage is one outbox table in one database, as a driver opens it: every
// consumer's interface at once. Consumers take the small interface they use.
type Storage interface {
	Queue
	Reaper
	Admin
	Schema
	// Table is the table's name as given (table or schema.table).
	Table() string
	// Describe says where the table is, for logs: the database, host and
	// user, never a password.
	Describe() string
	// Close releases every connection.
	Close()
}

// ErrTableMissing is returned by Check when the outbox table does not exist.
var ErrTableMissing = errors.New("outbox table does not exist")

// ErrUnreachable matches (errors.Is) the errors that mean the database
// could not be reached or refused the login, as opposed to a statement it
// rejected; drivers mark them with Unreachable.
var ErrUnreachable = errors.New("database unreachable")

// Unreachable marks err as the database being unreachable or refusing the
// login. The message stays err's own.
func Unreachable(err error) error { return unreachableError{err} }

type unreachableError struct{ err error }

func (e unreachableError) Error() string        { return e.err.Error() }
func (e unreachableError) Unwrap() error        { return e.err }
func (e unreachableError) Is(target error) bool { return target == ErrUnreachable }

// Driver describes a storage driver to the registry.
type Driver struct {
	// Name is the database's name in logs and errors: "PostgreSQL".
	Name string
	// DefaultTable is the table used when neither the URL nor
	// STORAGE_TABLE_NAME names one.
	DefaultTable string
	// CheckTable reports whether name is a table name this database
	// accepts by the driver's identifier rules, which keep names out of
	// SQL injection's way.
	CheckTable func(name string) error
	// Open returns the table the URL names without connecting yet.
	Open func(ctx context.Context, u *url.URL) (Storage, error)
}

// NewDriver is the Driver of a database whose table names are checked by
// parseTable (whatever it returns besides the error is not used here) and
// whose tables open from the URL's text: CheckTable and Open follow from
// those two, so that drivers only name them.
func NewDriver[T any, S Storage](name, defaultTable string, parseTable func(string) (T, error),
	open func(ctx context.Context, rawURL string) (S, error)) Driver {
	return Driver{
		Name:         name,
		DefaultTable: defaultTable,
		CheckTable: func(table string) error {
			_, err := parseTable(table)
			return err
		},
		Open: func(ctx context.Context, u *url.URL) (Storage, error) {
			s, err := open(ctx, u.String())
			if err != nil {
				// Not a nil *S in a non-nil interface.
				return nil, err
			}
			return s, nil
		},
	}
}

var drivers = registry.New[Driver]("storage")

// Register makes a driver available under the given URL schemes; driver
// packages call it from init.
func Register(d Driver, schemes ...string) {
	drivers.Register(d, schemes...)
}

// Alias makes an unknown scheme name suggest the driver's scheme ("mariadb"
// → mysql) in the error that refuses it; driver packages call it from init.
func Alias(name, scheme string) { drivers.Alias(name, scheme) }

// Open opens the table rawURL names with the driver registered for its
// scheme. It does not connect: call Check for that.
func Open(ctx context.Context, rawURL string) (Storage, error) {
	d, u, err := drivers.Lookup(rawURL)
	if err != nil {
		return nil, err
	}
	return d.Open(ctx, u)
}

// Lookup returns the driver registered for rawURL's scheme, without
// connecting, so that configuration can be checked before anything is
// opened.
func Lookup(rawURL string) (Driver, error) {
	d, _, err := drivers.Lookup(rawURL)
	return d, err
}

// URLDefault is the database the relay and relay-cli use when STORAGE_URL
// is not set: the local server's postgres database.
const URLDefault = "postgres://postgres@localhost:5432/postgres?sslmode=disable"

// URLWithTable returns rawURL with its table parameter set to table, unless
// table is empty or the URL already names a table: a table in the URL wins
// over STORAGE_TABLE_NAME. An unparsable URL is returned unchanged for Open
// to report.
func URLWithTable(rawURL, table string) string {
	u, err := url.Parse(rawURL)
	if err != nil || table == "" {
		return rawURL
	}
	q := u.Query()
	if q.Get("table") != "" {
		return rawURL
	}
	q.Set("table", table)
	u.RawQuery = q.Encode()
	return u.String()
}
