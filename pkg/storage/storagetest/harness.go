package storagetest

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
)

// Harness gives the suite real tables of one driver. Every subtest asks for
// tables of its own and runs in parallel with the others, so a harness must
// be safe for concurrent use.
type Harness interface {
	// New creates a migrated, empty outbox table that no other test uses
	// (in a schema or database of its own) and removes it when t ends.
	New(t testing.TB) Table
	// Unmigrated opens a storage on a table that does not exist yet, where
	// Migrate may create it (a schema or database of its own, removed when
	// t ends). The storage is closed when t ends.
	Unmigrated(t testing.TB) storage.Storage
}

// Table is one test's outbox table. Besides the driver's storage it offers
// what the suite needs to set rows up and look at them, which
// storage.Storage does not offer; a harness implements these with its
// database's own SQL, never through the Admin methods under test.
// Methods fail t on any error.
type Table interface {
	// Storage is the driver's storage for the table, closed when the test
	// ends.
	Storage() storage.Storage
	// URL is a storage URL naming the table: storage.Open on it gives a
	// second storage on the same table, as a second relay would have.
	URL() string
	// Insert writes the rows through the driver's producer insert (its
	// equivalent of postgres.Writer.WriteColumns), in one statement, with
	// every column as given. Headers may be any JSON object text, even one
	// no producer helper would write.
	Insert(t testing.TB, c outbox.Columns)
	// InsertUncommitted writes the rows as Insert does, but in a
	// transaction of a connection of its own that stays open, as a
	// producer's slow transaction would, until commit is called (the rows
	// become visible) or t ends (rolled back).
	InsertUncommitted(t testing.TB, c outbox.Columns) (commit func())
	// Set applies c to every row in ids in one statement, so that every
	// row gets the same moments, and fails t unless each id matched a row.
	Set(t testing.TB, c Change, ids ...uuid.UUID)
	// Rows reads every row and every column, oldest first (created_at,
	// then insertion order). Age is left zero. Seq is the driver's
	// insertion order where it has one.
	Rows(t testing.TB) []storage.Row
	// Now reads the database's clock.
	Now(t testing.TB) time.Time
	// Lock holds a row lock on id from another connection, as another
	// relay's claim statement would while it runs, until unlock is called
	// or t ends.
	Lock(t testing.TB, id uuid.UUID) (unlock func())
}

// Change sets columns of rows; nil and empty fields leave a column as it
// is. Moments are relative to the database's clock, with microsecond
// precision: a duration d sets the column to now() minus d (a negative d is
// in the future). Use Ago and Ptr to fill the fields in.
type Change struct {
	Status   outbox.Status
	Attempts *int
	// LastError and LockedBy: a pointer to "" stores NULL.
	LastError *string
	LockedBy  *string

	LockedAt    *time.Duration
	DeliveredAt *time.Duration
	CreatedAt   *time.Duration
	UpdatedAt   *time.Duration
	AvailableAt *time.Duration
}

// Ago is a moment d before the database's now(), for Change.
func Ago(d time.Duration) *time.Duration { return &d }

// Ptr returns a pointer to v, for Change's other fields.
func Ptr[T any](v T) *T { return &v }
