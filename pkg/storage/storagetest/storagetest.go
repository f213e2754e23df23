// Package storagetest is the conformance suite every storage driver runs
// against a real database, as publishertest is for brokers: it checks the
// rules written on pkg/storage's interfaces (claim order and limits, lease
// guards, reaping, back-off, ordered claims, every admin operation, the
// schema) through storage.Storage alone. A driver's test implements Harness
// for its database and calls Run.
package storagetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
)

// Run runs the suite against h's driver. Every subtest runs in parallel
// on tables of its own.
func Run(t *testing.T, h Harness) {
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.run(t, h)
		})
	}
}

// tests are the suite, by the interface rule each checks.
var tests = []struct {
	name string
	run  func(t *testing.T, h Harness)
}{
	{"Harness", testHarness},

	{"Claim/TakesAtMostLimitDueRows", testClaimTakesAtMostLimitDueRows},
	{"Claim/TakesOnlyPendingRows", testClaimTakesOnlyPendingRows},
	{"Claim/StopsAtMaxBytes", testClaimStopsAtMaxBytes},
	{"Claim/KeepsInsertionOrderWithinAStatement", testClaimKeepsInsertionOrderWithinAStatement},
	{"Claim/OrdersByInsertionNotCreatedAt", testClaimOrdersByInsertionNotCreatedAt},
	{"Claim/FindsALateCommitBehindItsPosition", testClaimFindsALateCommit},
	{"Claim/FindsALateCommitBehindManyClaims", testClaimFindsALateCommitBehindManyClaims},
	{"Claim/FindsRowsHandedBackAtOnce", testClaimFindsRowsHandedBackAtOnce},
	{"Claim/FindsRowsHandedBackWhateverTheirCreatedAt", testClaimFindsRowsHandedBackWhateverTheirCreatedAt},
	{"Claim/FindsRowsThatComeDue", testClaimFindsRowsThatComeDue},
	{"Claim/ReturnsRowContents", testClaimReturnsRowContents},
	{"Claim/SkipsRowsLockedByAnotherClaim", testClaimSkipsRowsLockedByAnotherClaim},
	{"Claim/ConcurrentClaimsNeverShareAnEvent", testConcurrentClaimsNeverShareAnEvent},

	{"Settle/Delivered", testSettleDelivered},
	{"Settle/DeleteDelivered", testDeleteDelivered},
	{"Settle/DeleteDeliveredKeepsToItsLease", testDeleteDeliveredKeepsToItsLease},
	{"Settle/FailedBacksOffAsAsked", testSettleFailed},
	{"Settle/FailedStoresErrorsSafely", testSettleFailedStoresErrorsSafely},
	{"Settle/ReleaseBurnsNoAttempt", testReleaseBurnsNoAttempt},
	{"Settle/EveryKindOnceAndAgainChangesNothing", testSettleEveryKindOnce},
	{"Settle/RenewMovesRowsToANewLease", testRenewMovesRowsToANewLease},
	{"Settle/AcceptsAnyStampARenewalMayHaveSet", testSettleAcceptsAnyStampARenewalMayHaveSet},
	{"Settle/LeaseStampsKeepMicroseconds", testLeaseStampsKeepMicroseconds},
	{"Settle/StaleLeasesChangeNothing", testStaleLeasesChangeNothing},

	{"Held/LeavesRowsPendingUnderItsLocks", testHeldClaimLeavesRowsPendingUnderItsLocks},
	{"Held/SettleRecordsEveryOutcome", testHeldSettleRecordsEveryOutcome},
	{"Held/StopsAtMaxBytes", testHeldClaimStopsAtMaxBytes},
	{"Held/AbortLeavesRowsAsTheyWere", testHeldAbortLeavesRowsAsTheyWere},
	{"Held/TransactionEndsWhenLeftIdle", testHeldTransactionEndsWhenLeftIdle},
	{"Held/BatchBecomesALease", testHeldBatchBecomesALease},
	{"Held/OutcomeRecordedAfterTheTransactionEnded", testHeldOutcomeRecordedAfterTheTransactionEnded},

	{"Reap/CountsAnAttemptAndBuriesAtTheLimit", testReapCountsAnAttemptAndBuriesAtTheLimit},
	{"Reap/LimitTakesOldestLeasesFirst", testReapLimitTakesOldestLeasesFirst},
	{"Reap/MaxAttemptsOneBuriesAtOnce", testReapWithMaxAttemptsOneBuriesAtOnce},

	{"Ordered/HoldsAKeyUntilItsEarlierEventsFinish", testOrderedClaimHoldsAKeyUntilItsEarlierEventsFinish},
	{"Ordered/WaitsOutABackoff", testOrderedClaimWaitsOutABackoff},
	{"Ordered/RespectsTheLimit", testOrderedClaimRespectsTheLimit},
	{"Ordered/ComparesKeysBytewise", testOrderedClaimComparesKeysBytewise},
	{"Ordered/ReturnsWhereTheWalkEnded", testOrderedClaimReturnsWhereTheWalkEnded},
	{"Ordered/CapsRunsAtRunLimit", testOrderedClaimCapsRunsAtRunLimit},
	{"Ordered/OnDeadSkipOrBlock", testOrderedClaimOnDead},
	{"Ordered/KeysStayInOrderUnderConcurrency", testOrderedClaimsKeepKeysInOrderUnderConcurrency},

	{"Admin/Backlog", testBacklogCountsPendingAndDead},
	{"Admin/Stats", testStats},
	{"Admin/StatsEstimatingDelivered", testStatsEstimatingDelivered},
	{"Admin/List", testList},
	{"Admin/ListFiltersAndPages", testListFiltersAndPages},
	{"Admin/ListsAKeyInWriteOrder", testListsAKeyInWriteOrder},
	{"Admin/DeliveryRate", testDeliveryRate},
	{"Admin/Get", testGet},
	{"Admin/Prune", testPrune},
	{"Admin/PrunePausesBetweenBatches", testPrunePausesBetweenBatches},
	{"Retention/LockIsExclusive", testRetentionLockIsExclusive},
	{"Admin/RetryDead", testRetryDead},
	{"Admin/Emit", testEmit},

	{"Schema/MissingTableThenMigrateTwice", testMissingTableThenMigrateTwice},
	{"NothingMatches", testNothingMatches},
	{"Notifier", testNotifier},
}

// event is a row for the suite to insert; zero fields get defaults: a new
// UUIDv7, type "test.event", no key, payload {"n":<index>}, headers {}.
type event struct {
	ID           uuid.UUID
	Type         string
	PartitionKey string
	Payload      []byte
	// Headers is raw JSON object text, written as given.
	Headers string
	// AvailableIn delays the event, by the test's clock.
	AvailableIn time.Duration
}

// insert writes events in one statement and returns their ids in order.
func insert(t testing.TB, tb Table, events ...event) []uuid.UUID {
	t.Helper()
	c := columns(t, events)
	tb.Insert(t, c)
	return c.IDs
}

// columns are the rows for events, with the defaults filled in.
func columns(t testing.TB, events []event) outbox.Columns {
	t.Helper()
	n := len(events)
	c := outbox.Columns{
		IDs:         make([]uuid.UUID, n),
		Types:       make([]string, n),
		Keys:        make([]string, n),
		Payloads:    make([][]byte, n),
		Headers:     make([]string, n),
		AvailableAt: make([]*time.Time, n),
	}
	now := time.Now()
	for i, e := range events {
		c.IDs[i] = e.ID
		if c.IDs[i] == uuid.Nil {
			c.IDs[i] = uuid.Must(uuid.NewV7())
		}
		c.Types[i] = e.Type
		if c.Types[i] == "" {
			c.Types[i] = "test.event"
		}
		c.Keys[i] = e.PartitionKey
		c.Payloads[i] = e.Payload
		if c.Payloads[i] == nil {
			c.Payloads[i] = fmt.Appendf(nil, `{"n":%d}`, i)
		}
		c.Headers[i] = e.Headers
		if c.Headers[i] == "" {
			c.Headers[i] = "{}"
		}
		if e.AvailableIn != 0 {
			at := now.Add(e.AvailableIn)
			c.AvailableAt[i] = &at
		}
	}
	return c
}

// insertN writes n events of one type.
func insertN(t testing.TB, tb Table, n int, eventType string) []uuid.UUID {
	t.Helper()
	events := make([]event, n)
	for i := range events {
		events[i] = event{Type: eventType}
	}
	return insert(t, tb, events...)
}

// rowOf reads one row through the harness; it fails t when the row is gone.
func rowOf(t testing.TB, tb Table, id uuid.UUID) storage.Row {
	t.Helper()
	for _, r := range tb.Rows(t) {
		if r.ID == id {
			return r
		}
	}
	t.Fatalf("row %s does not exist", id)
	return storage.Row{}
}

// testHarness checks the harness itself, so that a driver's author finds
// a mistake there before it shows up as a puzzling failure of the suite.
func testHarness(t *testing.T, h Harness) {
	tb := h.New(t)
	if tb.Storage() == nil || tb.URL() == "" {
		t.Fatal("New returned a table without a storage or a URL")
	}
	dbNow := tb.Now(t)
	if d := time.Since(dbNow); d > clockSlack || d < -clockSlack {
		t.Fatalf("Now = %s, the test's clock says %s", dbNow, time.Now())
	}
	binary := []byte{0, 0xff, 'x'}
	ids := insert(t, tb,
		event{Type: "a", PartitionKey: "k", Payload: binary, Headers: `{"h":"v","n":1}`},
		event{Type: "b", AvailableIn: time.Hour},
	)
	rows := tb.Rows(t)
	if len(rows) != 2 || rows[0].ID != ids[0] || rows[1].ID != ids[1] {
		t.Fatalf("Rows after inserting %v = %+v, want both in insertion order", ids, rows)
	}
	r := rows[0]
	if r.Type != "a" || r.PartitionKey == nil || *r.PartitionKey != "k" || string(r.Payload) != string(binary) ||
		r.Status != outbox.StatusPending || r.Attempts != 0 || r.LastError != nil || r.LockedBy != nil ||
		r.LockedAt != nil || r.DeliveredAt != nil {
		t.Errorf("inserted row reads back as %+v", r)
	}
	if h, err := outbox.ParseHeaders(r.Headers); err != nil || h["h"] != "v" || h["n"] != "1" {
		t.Errorf("headers read back as %s (%v, %v)", r.Headers, h, err)
	}
	if rows[1].PartitionKey != nil {
		t.Errorf("an empty key was stored as %q, want NULL", *rows[1].PartitionKey)
	}
	if d := rows[1].AvailableAt.Sub(dbNow); d < time.Hour-clockSlack || d > time.Hour+clockSlack {
		t.Errorf("available_at = %s, want about an hour after %s", rows[1].AvailableAt, dbNow)
	}

	tb.Set(t, Change{
		Status: outbox.StatusDelivering, Attempts: Ptr(3), LastError: Ptr("boom"), LockedBy: Ptr("relay-x"),
		LockedAt: Ago(time.Hour), DeliveredAt: Ago(2 * time.Hour), CreatedAt: Ago(3 * time.Hour),
		UpdatedAt: Ago(4 * time.Hour), AvailableAt: Ago(-5 * time.Hour),
	}, ids...)
	now := tb.Now(t)
	rows = tb.Rows(t)
	for _, r := range rows {
		if r.Status != outbox.StatusDelivering || r.Attempts != 3 || r.LastError == nil || *r.LastError != "boom" ||
			r.LockedBy == nil || *r.LockedBy != "relay-x" || r.LockedAt == nil || r.DeliveredAt == nil {
			t.Fatalf("after Set: %+v", r)
		}
		for name, c := range map[string]struct {
			at  time.Time
			ago time.Duration
		}{
			"locked_at": {*r.LockedAt, time.Hour}, "delivered_at": {*r.DeliveredAt, 2 * time.Hour},
			"created_at": {r.CreatedAt, 3 * time.Hour}, "updated_at": {r.UpdatedAt, 4 * time.Hour},
			"available_at": {r.AvailableAt, -5 * time.Hour},
		} {
			if d := now.Sub(c.at) - c.ago; d < 0 || d > clockSlack {
				t.Errorf("%s = %s, want %s before the database's %s", name, c.at, c.ago, now)
			}
		}
	}
	if !rows[0].LockedAt.Equal(*rows[1].LockedAt) || !rows[0].CreatedAt.Equal(rows[1].CreatedAt) {
		t.Errorf("one Set gave its rows different moments: %s and %s", rows[0].LockedAt, rows[1].LockedAt)
	}
	tb.Set(t, Change{LastError: Ptr(""), LockedBy: Ptr("")}, ids[0])
	if r := rowOf(t, tb, ids[0]); r.LastError != nil || r.LockedBy != nil || r.Attempts != 3 {
		t.Errorf("Set of empty strings = %+v, want last_error and locked_by NULL, the rest kept", r)
	}

	// A held row lock is seen by a claim from the storage and released.
	tb.Set(t, Change{Status: outbox.StatusPending, AvailableAt: Ago(0)}, ids...)
	unlock := tb.Lock(t, ids[0])
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := tb.Storage().Claim(ctx, storage.ClaimParams{RelayID: "r", Limit: 10})
	if err != nil {
		t.Fatalf("Claim beside a locked row: %v", err)
	}
	if len(b.Events) != 1 || b.Events[0].ID != ids[1] {
		t.Errorf("Claim beside a locked row took %v, want only %s", b.Events, ids[1])
	}
	unlock()
	if b, err := tb.Storage().Claim(ctx, storage.ClaimParams{RelayID: "r", Limit: 10}); err != nil || len(b.Events) != 1 {
		t.Errorf("Claim after unlock = %v, %v; want the row that was locked", b.Events, err)
	}
}

// clockSlack absorbs the difference between the test's clock and the
// database's and the time statements take.
const clockSlack = 5 * time.Second

var ctx = context.Background()

// claim makes an unordered claim and fails t on an error.
func claim(t testing.TB, s storage.Queue, relayID string, limit int) storage.Batch {
	t.Helper()
	b, err := s.Claim(ctx, storage.ClaimParams{RelayID: relayID, Limit: limit})
	if err != nil {
		t.Fatalf("Claim(%s, %d): %v", relayID, limit, err)
	}
	return b
}

func eventIDs(events []outbox.Event) []uuid.UUID {
	ids := make([]uuid.UUID, len(events))
	for i, e := range events {
		ids[i] = e.ID
	}
	return ids
}

func rowIDs(rows []storage.Row) []uuid.UUID {
	ids := make([]uuid.UUID, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	return ids
}

// counts returns the number of rows in each status.
func counts(t testing.TB, tb Table) map[outbox.Status]int {
	t.Helper()
	c := map[outbox.Status]int{}
	for _, r := range tb.Rows(t) {
		c[r.Status]++
	}
	return c
}

// byID reads every row once, for tests that look at many.
func byID(t testing.TB, tb Table) map[uuid.UUID]storage.Row {
	t.Helper()
	m := map[uuid.UUID]storage.Row{}
	for _, r := range tb.Rows(t) {
		m[r.ID] = r
	}
	return m
}

func within(got, want time.Time, slack time.Duration) bool {
	d := got.Sub(want)
	return d >= -slack && d <= slack
}

func sameSet(a, b []uuid.UUID) bool {
	if len(a) != len(b) {
		return false
	}
	seen := make(map[uuid.UUID]int, len(a))
	for _, id := range a {
		seen[id]++
	}
	for _, id := range b {
		seen[id]--
		if seen[id] < 0 {
			return false
		}
	}
	return true
}

// str reads a nullable text column; NULL reads as "".
func str(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// lockedAt reads a nullable locked_at; NULL reads as the zero time.
func lockedAt(r storage.Row) time.Time {
	if r.LockedAt == nil {
		return time.Time{}
	}
	return *r.LockedAt
}
