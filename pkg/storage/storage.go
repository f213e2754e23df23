// Package storage defines what the relay and relay-cli need from the outbox
// table: one method per query, each taking a params struct so new options do
// not change signatures. Drivers register for URL schemes and Open picks one.
package storage

import (
	"context"
	"errors"
	"net/url"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/pkg/driver"
	"github.com/outbox-relay/relay/pkg/outbox"
)

// Store is the outbox table.
type Store interface {
	// Claim moves up to Limit due PENDING rows to DELIVERING under a new
	// lease and returns them sorted oldest first.
	Claim(ctx context.Context, p ClaimParams) (Batch, error)
	// MarkDelivered moves leased rows to DELIVERED.
	MarkDelivered(ctx context.Context, p SettleParams) (int, error)
	// MarkFailed records failed attempts: back to PENDING after a delay, or
	// DEAD.
	MarkFailed(ctx context.Context, p FailParams) (int, error)
	// Release hands leased rows back to PENDING without counting an attempt.
	Release(ctx context.Context, p SettleParams) (int, error)
	// Renew moves a lease still in use to a new stamp, p.To, and returns
	// how many rows it covers now. Setting the same stamp twice is
	// harmless, so a renewal whose answer was lost can be repeated.
	Renew(ctx context.Context, p RenewParams) (int, error)
	// Reap takes back leases older than the lease timeout.
	Reap(ctx context.Context, p ReapParams) (ReapResult, error)

	// Listen calls onNotify whenever events are inserted, until ctx ends
	// (nil) or its connection fails (an error; call it again).
	Listen(ctx context.Context, onNotify func()) error

	// Migrate creates the table and its indexes and trigger if missing.
	Migrate(ctx context.Context) (MigrateResult, error)
	// Check verifies that the database answers and the table is usable.
	Check(ctx context.Context) error
	// Close releases every connection.
	Close()
}

// ErrTableMissing is returned by Check when the outbox table does not exist.
var ErrTableMissing = errors.New("outbox table does not exist")

// Lease identifies one claim: the relay that made it and the instant it did.
// Every transition out of DELIVERING names the lease it settles, so a relay
// whose lease was reaped and claimed again changes nothing.
type Lease struct {
	RelayID  string
	LockedAt time.Time
	// Unconfirmed are stamps of renewals whose answer was lost: any may
	// have landed, so the rows hold LockedAt or one of these.
	Unconfirmed []time.Time
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
	// Ordering partition claims an event only when every earlier event with
	// its key is finished, and a key's events as a run in order.
	Ordering Ordering
	// OnDead says whether a DEAD event holds its key back (partition only).
	OnDead DeadPolicy
	// After is the last key the previous ordered claim took; the next one
	// starts after it so that every key gets its turn.
	After string
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
}

// SettleParams names leased rows whose outcome needs no detail.
type SettleParams struct {
	Lease Lease
	IDs   []uuid.UUID
}

// Failure is the outcome of one failed publish.
type Failure struct {
	ID    uuid.UUID
	Error string
	// Dead sends the row to DEAD; otherwise it is PENDING again after Delay.
	Dead  bool
	Delay time.Duration
}

// FailParams records failed publishes of leased rows.
type FailParams struct {
	Lease    Lease
	Failures []Failure
}

// ReapParams selects expired leases to take back.
type ReapParams struct {
	// LeaseTimeout is how long a lease may be held before it is taken back.
	LeaseTimeout time.Duration
	// Limit bounds the rows changed by one statement.
	Limit int
	// MaxAttempts sends a row DEAD when its attempts, counting the expired
	// lease, reach this number.
	MaxAttempts int
}

// ReapResult counts what one Reap call changed.
type ReapResult struct {
	Requeued int
	Dead     int
}

// MigrateResult lists the schema objects a migration created and the ones
// that were already there.
type MigrateResult struct {
	Created []string
	Existed []string
}

var drivers = driver.NewRegistry[Store]("storage")

// Register makes a driver available to Open under the given URL schemes;
// driver packages call it from init.
func Register(opener driver.Opener[Store], schemes ...string) {
	drivers.Register(opener, schemes...)
}

// Open connects the driver registered for rawURL's scheme.
func Open(ctx context.Context, rawURL string) (Store, error) {
	return drivers.Open(ctx, rawURL)
}

// Check reports whether rawURL names a registered driver, without connecting.
func Check(rawURL string) error { return drivers.Known(rawURL) }

// URLDefault is the database the relay and relay-cli use when STORAGE_URL
// is not set: the local server's postgres database.
const URLDefault = "postgres://postgres@localhost:5432/postgres?sslmode=disable"

// URLWithTable returns rawURL with its table parameter set to table, unless
// the URL already names a table: a table in the URL wins over
// STORAGE_TABLE_NAME. An unparsable URL is returned unchanged for Open to
// report.
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
