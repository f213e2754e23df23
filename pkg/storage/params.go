package storage

import (
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/pkg/outbox"
)

// The params and results of the Queue, Reaper and Schema methods.

// Lease identifies one claim: the relay that made it and the instant it did.
// Every transition out of DELIVERING names the lease it settles, so a relay
// whose lease was reaped and claimed again changes nothing.
type Lease struct {
	RelayID  string
	LockedAt time.Time
	// Unconfirmed are stamps of renewals whose answer was lost: any may
	// have landed, so the rows hold LockedAt or one of these.
	Unconfirmed []time.Time
	// CreatedFrom and CreatedTo bound the created_at of the claim's rows
	// when the driver knows them (zero: unknown). Settling a table
	// partitioned by created_at then looks in those partitions only.
	CreatedFrom, CreatedTo time.Time
}

// Stamps are the locked_at values the lease's rows may hold.
func (l Lease) Stamps() []time.Time {
	return append([]time.Time{l.LockedAt}, l.Unconfirmed...)
}

// RenewParams moves leased rows to a new stamp.
type RenewParams struct {
	Lease Lease
	IDs   []uuid.UUID
	// To is the new locked_at: the relay picks it, so that it knows the
	// new lease even when the answer does not arrive.
	To time.Time
}

// ClaimParams selects a batch to claim.
type ClaimParams struct {
	RelayID string
	Limit   int
	// MaxBytes bounds the batch's payload and header bytes (headers as the
	// database stores them): the claim stops before the event that would
	// pass it, but always takes the first, however large, so that no event
	// is stuck. 0 means no limit.
	MaxBytes int64
	// Ordering partition claims an event only when every earlier event with
	// its key is finished, and a key's events as a run in order.
	Ordering Ordering
	// OnDead says whether a DEAD event holds its key back (partition only).
	OnDead DeadPolicy
	// After is where an ordered claim's walk over keys starts: the
	// previous claim's Batch.After, passed back unchanged ("" at first).
	// The walk takes the keys after it in bytewise order, then wraps
	// around to the start and ends with After itself, so that every key
	// gets its turn.
	After string
	// RunLimit bounds the events of one key an ordered claim takes. A
	// batch of whole runs from a few keys would leave the other keys to
	// the next claim, which can then proceed while this batch is at the
	// broker, and the cap bounds the publishing rounds per batch. 0 means
	// RunLimitDefault.
	RunLimit int
	// SweepInterval is how often a claim also reads again behind where
	// the relay's claims have reached (MySQL's cursor floor, PostgreSQL's
	// claim frontier), at a cost that grows with the dead row versions a
	// held-back vacuum leaves there. Where a row can commit behind that
	// place (MySQL's cursor) it bounds how long the row waits;
	// PostgreSQL's claims need it for nothing but defence in depth. 0
	// means SweepIntervalDefault.
	SweepInterval time.Duration
	// Fresh says which fresh events a claim may take; the zero value, all
	// of them. Only drivers that implement LogRecorder honour it.
	Fresh FreshEvents
}

// FreshEvents says which fresh events — written and never handed back:
// available_at not after created_at — a claim may take. While the relay
// polls, all. Beside a log reader (CAPTURE=wal or binlog), those no
// stream delivers: those up to BackfillTo, which the relay's own stream
// leaves to the claims, and, WhenUnlocked, all of them while no stream
// holds the table's log lock (PostgreSQL's is an advisory lock,
// schema/postgres.LogLockClass, MySQL's the row of <table>_log_lock; the
// claim's transaction then holds it shared, so that a stream that starts
// waits for it). Events due again
// (retried, released, reaped, scheduled) are the claims' either way.
// Under OrderingPartition it applies to the first unfinished event of
// each key: a key whose head is due again is claimed with its whole run.
type FreshEvents struct {
	// ToLog: a log reader delivers fresh events while it streams.
	ToLog bool
	// BackfillTo, with ToLog, is the highest seq of the fresh events the
	// claims take whoever streams: those the relay's own stream leaves to
	// them (0: none).
	BackfillTo int64
	// WhenUnlocked, with ToLog: the relay's own stream does not run, and
	// the claims take every fresh event while no stream holds the log
	// lock. Not while it runs: its batches still in flight after its
	// connection ended are not recorded yet.
	WhenUnlocked bool
}

// UpTo is the highest seq of a fresh event the claim may take whoever
// streams (every seq without ToLog).
func (f FreshEvents) UpTo() int64 {
	if !f.ToLog {
		return math.MaxInt64
	}
	return max(f.BackfillTo, 0)
}

// SweepIntervalDefault is ClaimParams.SweepInterval's default. On MySQL
// and MariaDB with CAPTURE=poll it bounds the wait of an event whose
// transaction commits late, behind the cursor's floor: at most this long,
// plus one claim (the driver's ClaimBound). PostgreSQL's claim frontier
// finds such events by rule, and with CAPTURE=binlog the log delivers
// them; there a sweep is defence in depth only.
const SweepIntervalDefault = 10 * time.Second

// RunLimitDefault is ClaimParams.RunLimit's default. With 100 active keys,
// runs of 20 took ordered throughput from 52 % to 90 % of unordered.
const RunLimitDefault = 20

// WithDefaults returns p with its zero fields set to their defaults. Every
// driver's Claim starts with it, so that no driver has defaults of its own.
func (p ClaimParams) WithDefaults() ClaimParams {
	if p.RunLimit <= 0 {
		p.RunLimit = RunLimitDefault
	}
	if p.SweepInterval <= 0 {
		p.SweepInterval = SweepIntervalDefault
	}
	return p
}

// Ordering is the ORDERING setting.
type Ordering string

// Orderings.
const (
	// OrderingNone claims the oldest due events, whatever their keys.
	OrderingNone Ordering = "none"
	// OrderingPartition keeps every partition key's events in order at the
	// broker, across relays, retries and crashes.
	OrderingPartition Ordering = "partition"
)

// DeadPolicy is the ORDERING_ON_DEAD setting.
type DeadPolicy string

// Dead policies.
const (
	// DeadSkip lets the events after a DEAD one go on.
	DeadSkip DeadPolicy = "skip"
	// DeadBlock holds the key until an operator retries or removes the DEAD
	// event.
	DeadBlock DeadPolicy = "block"
)

// Batch is the result of one claim.
type Batch struct {
	Lease  Lease
	Events []outbox.Event
	// After is where the next ordered claim's walk starts (its
	// ClaimParams.After): the last key this claim took in its walk, or
	// ClaimParams.After when it took none. The driver, which knows its
	// walk, sets it; the relay only passes it back. Unordered claims
	// leave it empty.
	After string
	// Full says the claim stopped at a limit of its own (the rows it may
	// lock, or its byte limit) with events left that it could have taken:
	// the relay claims again at once, as after a batch of BATCH_SIZE
	// events, rather than wait for a wakeup. Drivers that cannot tell
	// leave it false, and the relay judges by the batch's size.
	Full bool
}

// Bytes is the batch's payload and header bytes, as its events carry them
// (the measure ClaimParams.MaxBytes bounds, up to how the database stores
// headers).
func (b Batch) Bytes() int64 {
	var n int64
	for i := range b.Events {
		n += int64(len(b.Events[i].Payload) + len(b.Events[i].Headers))
	}
	return n
}

// Failure is the outcome of one failed publish.
type Failure struct {
	ID    uuid.UUID
	Error string
	// Dead sends the row to DEAD; otherwise it is PENDING again after Delay.
	Dead  bool
	Delay time.Duration
}

// LastErrorMax bounds a stored last_error, in bytes: broker errors can be
// long.
const LastErrorMax = 2000

// StorableError is what a driver stores as last_error for msg: valid UTF-8
// without NUL bytes, which text columns reject (failing the settle of the
// whole batch), each replaced by U+FFFD; and at most LastErrorMax bytes, cut
// at a rune boundary and marked with "…" when longer.
func StorableError(msg string) string {
	msg = strings.ToValidUTF8(strings.ReplaceAll(msg, "\x00", "\uFFFD"), "\uFFFD")
	if len(msg) <= LastErrorMax {
		return msg
	}
	cut := LastErrorMax
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "…"
}

// Outcome is what became of a batch's events after their publish, as one
// call hands it to the storage whatever the batch's source: Queue.Settle
// (a leased batch), HeldTx.Settle and HeldQueue.SettleHeld (a held one),
// LogRecorder.Record (events read from the log).
type Outcome struct {
	// Delivered went to the broker.
	Delivered []uuid.UUID
	// Delete deletes the delivered rows instead of marking them
	// (DELIVERED_RETENTION=0).
	Delete bool
	// Failed count an attempt each: PENDING again after their Delay, or
	// DEAD.
	Failed []Failure
	// Released go back untouched and due at once, attempts unchanged: the
	// broker was unavailable, the relay is shutting down, or (the log's
	// events) an earlier event holds their key and the claims deliver
	// them in its order.
	Released []uuid.UUID
	// CreatedAt holds, by id, the created_at of rows as the log read them
	// (LogRecorder only; the other sources leave it nil), so that a table
	// partitioned by it is searched in one partition per row. An id it
	// lacks, or a zero time (unknown, such as ±infinity), is searched in
	// every partition.
	CreatedAt map[uuid.UUID]time.Time
}

// Len is how many events the outcome covers.
func (o Outcome) Len() int { return len(o.Delivered) + len(o.Failed) + len(o.Released) }

// Settled counts the rows one settle call changed, by kind of outcome
// (Delivered counts deleted rows too).
type Settled struct {
	Delivered, Failed, Released int
}

// Len is how many rows the call changed.
func (s Settled) Len() int { return s.Delivered + s.Failed + s.Released }

// Add is s and t counted together.
func (s Settled) Add(t Settled) Settled {
	return Settled{Delivered: s.Delivered + t.Delivered, Failed: s.Failed + t.Failed, Released: s.Released + t.Released}
}

// BlockedKeysParams asks which keys an earlier event blocks (LogRecorder).
type BlockedKeysParams struct {
	Keys   []string
	OnDead DeadPolicy
	// Backfill is the highest seq the claims backfill (the claims'
	// FreshEvents.BackfillTo): fresh events up to it are the claims' to
	// deliver, so they block their key too. 0: no backfill.
	Backfill int64
}

// The lease timeout and the attempt limit belong to two parties: the
// engine, which holds leases and counts failed publishes, and the reaper,
// which takes expired leases back and counts them as attempts. Their
// defaults and the lease's floor are decided here, once for both.
const (
	// LeaseTimeoutDefault is how long a lease holds without renewal.
	LeaseTimeoutDefault = time.Minute
	// LeaseTimeoutMin leaves room for a claim, a publish and the renewals
	// every third of the lease; shorter leases expire under a working relay.
	LeaseTimeoutMin = 500 * time.Millisecond
	// MaxAttemptsDefault is the attempt count at which an event goes DEAD.
	MaxAttemptsDefault = 25
)

// ReapParams selects expired leases to take back.
type ReapParams struct {
	// LeaseTimeout is how long a lease may be held before it is taken back.
	LeaseTimeout time.Duration
	// Limit bounds the rows changed by one statement.
	Limit int
	// MaxAttempts is the retry limit, the engine's and the reaper's.
	// Drivers do not compare attempts with it themselves: they apply
	// DeadFrom.
	MaxAttempts int
}

// DeadFrom is the reap rule, decided here for every driver: an expired
// lease counts as an attempt, and a row whose attempts then reach
// MaxAttempts is DEAD. So a reaped row goes DEAD when its attempts before
// the reap are at least DeadFrom, and PENDING otherwise. Drivers pass the
// number to their statement, which compares (attempts >= DeadFrom) and adds
// the attempt; no statement works the limit out itself.
func (p ReapParams) DeadFrom() int { return p.MaxAttempts - 1 }

// Dead reports whether reaping a row that has attempts attempts sends it
// DEAD: DeadFrom's rule, for a driver that counts its outcomes in Go.
func (p ReapParams) Dead(attempts int) bool { return attempts >= p.DeadFrom() }

// ReapResult counts what one Reap call changed.
type ReapResult struct {
	Requeued int
	Dead     int
}

// MigrateOptions says how a migration treats a live table. The zero value
// is an upgrade that never stops the application's writes for longer than
// DefaultLockTimeout at a time and drops nothing an earlier release uses.
type MigrateOptions struct {
	// Plan changes nothing: the result's Plan lists what would run.
	Plan bool
	// Cleanup also drops what earlier releases used and this one does not
	// (their indexes): run it once no relay of an earlier release is left.
	Cleanup bool
	// LockTimeout bounds how long one statement that needs a lock writers
	// would queue behind waits for it; the statement is tried again
	// later. 0 means DefaultLockTimeout.
	LockTimeout time.Duration
	// AllowBlocking lets a change that blocks the table's writers for its
	// whole run go ahead (MySQL: a column that rebuilds the table), for a
	// maintenance window. Without it such a change is refused.
	AllowBlocking bool
	// Progress, when set, hears how long steps (index builds) go on.
	Progress func(msg string)
}

// DefaultLockTimeout is MigrateOptions.LockTimeout's default: a producer
// waits at most about this long behind a migration statement.
const DefaultLockTimeout = 500 * time.Millisecond

// LockTimeoutOrDefault is LockTimeout, or DefaultLockTimeout when unset.
func (o MigrateOptions) LockTimeoutOrDefault() time.Duration {
	if o.LockTimeout <= 0 {
		return DefaultLockTimeout
	}
	return o.LockTimeout
}

// Report calls Progress when it is set.
func (o MigrateOptions) Report(format string, args ...any) {
	if o.Progress != nil {
		o.Progress(fmt.Sprintf(format, args...))
	}
}

// MigrateResult lists the schema objects a migration created, the ones
// that were already there, and the ones it dropped (indexes of earlier
// versions, with MigrateOptions.Cleanup); Kept the indexes of earlier
// versions it left for a later cleanup, Rebuilt the indexes it found
// INVALID (a build cut short) and built again. With MigrateOptions.Plan,
// Plan lists the statements it would run, and nothing changed.
type MigrateResult struct {
	Created []string
	Existed []string
	Dropped []string
	Kept    []string
	Rebuilt []string
	Plan    []MigrateStep
	// TableBytes and TableRows (an estimate) size the table before the
	// migration; -1 when it did not exist.
	TableBytes int64
	TableRows  int64
	// LockTimeout is the longest a statement waited for a lock writers
	// queue behind, as the database counts it (MySQL: whole seconds).
	LockTimeout time.Duration
}

// MigrateStep is one statement a migration would run.
type MigrateStep struct {
	SQL string
	// Blocks says whether and how the statement holds up the table's
	// writers: "no", "briefly" (a lock bounded by LockTimeout, then
	// retried), or "yes" (for the whole statement).
	Blocks string
	// Why says what it is for.
	Why string
}
