package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/postgres"
	"github.com/outbox-relay/relay/pkg/storage/postgres/pgtest"
	schema "github.com/outbox-relay/relay/schema/postgres"
)

// password is recognisable in any error text that leaks it.
const password = "Sup3rS3cretPW"

// clockSlack absorbs the difference between the test's clock and the
// server's and the time statements take.
const clockSlack = 5 * time.Second

var ctx = context.Background()

func claim(t *testing.T, s *postgres.Store, relayID string, limit int) storage.Batch {
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

// lockedAt reads a row's locked_at; the zero time when it is NULL.
func lockedAt(t *testing.T, tb *pgtest.Table, id uuid.UUID) time.Time {
	t.Helper()
	var at *time.Time
	if err := tb.Store.Pool().QueryRow(ctx, "SELECT locked_at FROM "+tb.Name+" WHERE event_id = $1", id).Scan(&at); err != nil {
		t.Fatalf("read locked_at of %s: %v", id, err)
	}
	if at == nil {
		return time.Time{}
	}
	return *at
}

// expire makes the leases on ids look as if they were taken age ago.
func expire(t *testing.T, tb *pgtest.Table, age time.Duration, ids ...uuid.UUID) {
	t.Helper()
	n := tb.Exec(t, "UPDATE {{table}} SET locked_at = now() - $1::bigint * interval '1 microsecond' WHERE event_id = ANY($2) AND status = 'DELIVERING'",
		age.Microseconds(), ids)
	if int(n) != len(ids) {
		t.Fatalf("expire: changed %d rows, want %d", n, len(ids))
	}
}

// reap runs one Reap with a one-minute lease timeout.
func reap(t *testing.T, tb *pgtest.Table, limit, maxAttempts int) storage.ReapResult {
	t.Helper()
	res, err := tb.Store.Reap(ctx, storage.ReapParams{LeaseTimeout: time.Minute, Limit: limit, MaxAttempts: maxAttempts})
	if err != nil {
		t.Fatalf("Reap: %v", err)
	}
	return res
}

func within(got, want time.Time, slack time.Duration) bool {
	d := got.Sub(want)
	return d >= -slack && d <= slack
}

// ---- Claim ----------------------------------------------------------------

func TestClaimTakesAtMostLimitDueRows(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	due := tb.InsertN(t, 5, "due")
	later := tb.Insert(t, pgtest.Event{Type: "later", AvailableIn: time.Hour})[0]

	first := claim(t, tb.Store, "relay-1", 3)
	if len(first.Events) != 3 {
		t.Fatalf("first claim with Limit 3 took %d events", len(first.Events))
	}
	second := claim(t, tb.Store, "relay-1", 10)
	if len(second.Events) != 2 {
		t.Fatalf("second claim took %d events, want the 2 due rows left", len(second.Events))
	}
	if third := claim(t, tb.Store, "relay-1", 10); len(third.Events) != 0 {
		t.Fatalf("third claim took %v, want nothing: the only PENDING row is not due", eventIDs(third.Events))
	}

	claimed := append(eventIDs(first.Events), eventIDs(second.Events)...)
	if !sameSet(claimed, due) {
		t.Fatalf("claimed %v, want the due rows %v", claimed, due)
	}
	for _, b := range []storage.Batch{first, second} {
		if b.Lease.RelayID != "relay-1" {
			t.Errorf("Lease.RelayID = %q", b.Lease.RelayID)
		}
		if !within(b.Lease.LockedAt, time.Now(), clockSlack) {
			t.Errorf("Lease.LockedAt = %s, want about now", b.Lease.LockedAt)
		}
		for _, e := range b.Events {
			row := tb.Get(t, e.ID)
			if row.Status != outbox.StatusDelivering || row.LockedBy != "relay-1" {
				t.Errorf("claimed row %s: status %s locked_by %q, want DELIVERING by relay-1", e.ID, row.Status, row.LockedBy)
			}
			if at := lockedAt(t, tb, e.ID); !at.Equal(b.Lease.LockedAt) {
				t.Errorf("row %s locked_at %s != Lease.LockedAt %s", e.ID, at, b.Lease.LockedAt)
			}
		}
	}
	if row := tb.Get(t, later); row.Status != outbox.StatusPending || row.LockedBy != "" {
		t.Errorf("row available in an hour was touched: %+v", row)
	}
	if c := tb.Counts(t); c[outbox.StatusDelivering] != 5 || c[outbox.StatusPending] != 1 {
		t.Errorf("counts = %v, want 5 DELIVERING and 1 PENDING", c)
	}
}

func TestClaimTakesOnlyPendingRows(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	ids := tb.InsertN(t, 4, "e")
	tb.Exec(t, "UPDATE {{table}} SET status = 'DELIVERED', delivered_at = now() WHERE event_id = $1", ids[0])
	tb.Exec(t, "UPDATE {{table}} SET status = 'DEAD' WHERE event_id = $1", ids[1])
	tb.Exec(t, "UPDATE {{table}} SET status = 'DELIVERING', locked_by = 'other', locked_at = now() WHERE event_id = $1", ids[2])

	b := claim(t, tb.Store, "relay-1", 10)
	if got := eventIDs(b.Events); !slices.Equal(got, ids[3:]) {
		t.Fatalf("claimed %v, want only the PENDING row %v", got, ids[3])
	}
	if row := tb.Get(t, ids[2]); row.LockedBy != "other" {
		t.Errorf("another relay's lease was taken: %+v", row)
	}
}

func TestClaimOfAnEmptyTable(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	b := claim(t, tb.Store, "relay-1", 100)
	if len(b.Events) != 0 {
		t.Fatalf("claimed %d events from an empty table", len(b.Events))
	}
}

func TestClaimKeepsInsertionOrderWithinATransaction(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	const n = 50
	events := make([]pgtest.Event, n)
	for i := range events {
		// Later rows become available earlier, so that neither the pickup
		// order nor available_at matches the order they were written in.
		events[i] = pgtest.Event{Type: "ordered", AvailableIn: -time.Duration(i) * time.Millisecond}
	}
	ids := tb.Insert(t, events...)
	// Move every third row to the end of the heap, so that a scan does not
	// return the rows in insertion order either.
	tb.Exec(t, "UPDATE {{table}} SET updated_at = now() WHERE seq % 3 = 0")

	var distinct int
	if err := tb.Store.Pool().QueryRow(ctx, "SELECT count(DISTINCT created_at) FROM "+tb.Name).Scan(&distinct); err != nil {
		t.Fatal(err)
	}
	if distinct != 1 {
		t.Fatalf("rows inserted in one transaction have %d different created_at values; the test needs them equal", distinct)
	}

	b := claim(t, tb.Store, "relay-1", n)
	if got := eventIDs(b.Events); !slices.Equal(got, ids) {
		t.Fatalf("claimed in order\n%v\nwant insertion order\n%v", got, ids)
	}
}

func TestClaimOrdersByCreatedAtFirst(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	// Two transactions: the second one's rows are newer but due earlier.
	older := tb.Insert(t, pgtest.Event{}, pgtest.Event{}, pgtest.Event{})
	newer := tb.Insert(t, pgtest.Event{AvailableIn: -time.Minute}, pgtest.Event{AvailableIn: -time.Minute})
	// Give the newer rows the lowest seq values, so that only created_at
	// can put the older transaction first.
	tb.Exec(t, "UPDATE {{table}} SET seq = seq - 1000000 WHERE event_id = ANY($1)", newer)

	b := claim(t, tb.Store, "relay-1", 10)
	want := append(slices.Clone(older), newer...)
	if got := eventIDs(b.Events); !slices.Equal(got, want) {
		t.Fatalf("claimed in order\n%v\nwant oldest created_at first\n%v", got, want)
	}
}

func TestClaimStopsAtMaxBytes(t *testing.T) {
	t.Parallel()
	for _, ordering := range []storage.Ordering{storage.OrderingNone, storage.OrderingPartition} {
		t.Run(string(ordering), func(t *testing.T) {
			t.Parallel()
			tb := pgtest.New(t)
			big := func(n int) pgtest.Event {
				return pgtest.Event{PartitionKey: "k", Payload: []byte(strings.Repeat("p", n))}
			}
			// 3 × 400 KB fit in 1 MB with their headers; the fourth does not.
			ids := tb.Insert(t, big(400_000), big(400_000), big(100_000), big(400_000), big(10))
			p := storage.ClaimParams{RelayID: "r", Limit: 100, MaxBytes: 1_000_000, Ordering: ordering}
			b, err := tb.Store.Claim(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(eventIDs(b.Events), ids[:3]) {
				t.Fatalf("claimed %d events, want the first 3 (900 KB of 1 MB)", len(b.Events))
			}
			if b.Bytes() > p.MaxBytes {
				t.Errorf("batch holds %d bytes, over MaxBytes %d", b.Bytes(), p.MaxBytes)
			}

			// An event larger than the limit still goes, alone (once the
			// key's earlier events are done, for ordered claims).
			if _, err := tb.Store.MarkDelivered(ctx, storage.SettleParams{Lease: b.Lease, IDs: eventIDs(b.Events)}); err != nil {
				t.Fatal(err)
			}
			tb.Insert(t, big(3_000_000))
			p.MaxBytes = 100_000
			b, err = tb.Store.Claim(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if len(b.Events) != 1 || b.Events[0].ID != ids[3] {
				t.Fatalf("claimed %v, want the 400 KB event alone", eventIDs(b.Events))
			}
		})
	}
}

func TestClaimReadsARowWithAnInfiniteCreatedAt(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	ids := tb.InsertN(t, 40, "good")
	bad := tb.InsertN(t, 1, "bad")[0]
	tb.Exec(t, "UPDATE {{table}} SET created_at = 'infinity' WHERE event_id = $1", bad)

	b := claim(t, tb.Store, "r1", 100)
	if len(b.Events) != 41 {
		t.Fatalf("claimed %d events, want all 41", len(b.Events))
	}
	last := b.Events[40]
	if last.ID != bad || !last.CreatedAt.IsZero() {
		t.Errorf("last event = %s created %s, want %s with a zero CreatedAt", last.ID, last.CreatedAt, bad)
	}
	if !slices.Equal(eventIDs(b.Events[:40]), ids) {
		t.Errorf("the good events were not claimed oldest first")
	}
}

func TestAFailedClaimHandsItsRowsBack(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	tb.InsertN(t, 10, "e")
	other := claim(t, tb.Store, "r1", 4)
	failed := claim(t, tb.Store, "r1", 6) // as if its rows could not be read
	cause := errors.New("connection reset while reading rows")

	err := tb.Store.HandBack(ctx, failed.Lease, cause)
	if !errors.Is(err, cause) || !strings.Contains(err.Error(), "6 rows were handed back") {
		t.Fatalf("HandBack = %v, want the cause and the count handed back", err)
	}
	for _, ev := range failed.Events {
		if r := tb.Get(t, ev.ID); r.Status != outbox.StatusPending || r.Attempts != 0 {
			t.Errorf("row %s is %s with %d attempts, want PENDING with none burned", ev.ID, r.Status, r.Attempts)
		}
	}
	for _, ev := range other.Events {
		if r := tb.Get(t, ev.ID); r.Status != outbox.StatusDelivering {
			t.Errorf("row %s of the relay's other lease is %s, want it left DELIVERING", ev.ID, r.Status)
		}
	}
}

func TestClaimReturnsRowContents(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	binary := []byte{0x00, 0xff, 0xfe, 'o', 'k', 0x80}
	ids := tb.Insert(t,
		pgtest.Event{Type: "order.created", PartitionKey: "customer-42", Payload: binary,
			Headers: `{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","amount":1.50,"vip":true,"none":null}`},
		pgtest.Event{Type: "order.deleted", Payload: []byte(`{"id":1}`)},
	)
	tb.Exec(t, "UPDATE {{table}} SET attempts = 3 WHERE event_id = $1", ids[0])

	b := claim(t, tb.Store, "relay-1", 10)
	if len(b.Events) != 2 {
		t.Fatalf("claimed %d events, want 2", len(b.Events))
	}
	byID := map[uuid.UUID]outbox.Event{}
	for _, e := range b.Events {
		byID[e.ID] = e
	}

	keyed := byID[ids[0]]
	if keyed.Type != "order.created" || keyed.PartitionKey != "customer-42" || keyed.Attempts != 3 {
		t.Errorf("event = type %q key %q attempts %d, want order.created customer-42 3", keyed.Type, keyed.PartitionKey, keyed.Attempts)
	}
	if string(keyed.Payload) != string(binary) {
		t.Errorf("payload = %x, want %x", keyed.Payload, binary)
	}
	headers, err := outbox.ParseHeaders(keyed.Headers)
	if err != nil {
		t.Fatalf("headers %s: %v", keyed.Headers, err)
	}
	wantHeaders := map[string]string{
		"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"amount":      "1.50",
		"vip":         "true",
	}
	if !maps.Equal(headers, wantHeaders) {
		t.Errorf("headers = %q (raw %s), want %q", headers, keyed.Headers, wantHeaders)
	}
	var createdAt time.Time
	if err := tb.Store.Pool().QueryRow(ctx, "SELECT created_at FROM "+tb.Name+" WHERE event_id = $1", ids[0]).Scan(&createdAt); err != nil {
		t.Fatal(err)
	}
	if !keyed.CreatedAt.Equal(createdAt) {
		t.Errorf("CreatedAt = %s, want the row's %s", keyed.CreatedAt, createdAt)
	}

	unkeyed := byID[ids[1]]
	if unkeyed.PartitionKey != "" {
		t.Errorf("NULL partition_key came back as %q, want empty", unkeyed.PartitionKey)
	}
	if unkeyed.Attempts != 0 || string(unkeyed.Payload) != `{"id":1}` {
		t.Errorf("unkeyed event = %+v", unkeyed)
	}
	if h, err := outbox.ParseHeaders(unkeyed.Headers); err != nil || len(h) != 0 {
		t.Errorf("default headers %s parse to %q, %v; want none", unkeyed.Headers, h, err)
	}
}

func TestClaimSkipsRowsLockedByAnotherClaim(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	ids := tb.InsertN(t, 3, "e")
	// Another relay's claim statement, caught while it holds ids[0].
	tx, err := tb.Store.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT 1 FROM "+tb.Name+" WHERE event_id = $1 FOR UPDATE", ids[0]); err != nil {
		t.Fatal(err)
	}

	claimCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	b, err := tb.Store.Claim(claimCtx, storage.ClaimParams{RelayID: "relay-1", Limit: 10})
	if err != nil {
		t.Fatalf("Claim waited for the locked row instead of skipping it: %v", err)
	}
	if got := eventIDs(b.Events); !slices.Equal(got, ids[1:]) {
		t.Fatalf("claimed %v, want the unlocked rows %v", got, ids[1:])
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if b := claim(t, tb.Store, "relay-1", 10); !slices.Equal(eventIDs(b.Events), ids[:1]) {
		t.Fatalf("after the lock was released claimed %v, want %v", eventIDs(b.Events), ids[0])
	}
}

func TestConcurrentClaimsNeverShareAnEvent(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	const n, relays, batch = 2000, 4, 100
	ids := tb.InsertN(t, n, "shared")

	claimedBy := make([][]uuid.UUID, relays)
	errs := make([]error, relays)
	var wg sync.WaitGroup
	for r := range relays {
		wg.Go(func() {
			for {
				b, err := tb.Store.Claim(ctx, storage.ClaimParams{RelayID: fmt.Sprintf("relay-%d", r), Limit: batch})
				if err != nil {
					errs[r] = err
					return
				}
				if len(b.Events) == 0 {
					return
				}
				claimedBy[r] = append(claimedBy[r], eventIDs(b.Events)...)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}

	owner := map[uuid.UUID]int{}
	for r, claimed := range claimedBy {
		for _, id := range claimed {
			if prev, dup := owner[id]; dup {
				t.Fatalf("event %s claimed by relay-%d and relay-%d", id, prev, r)
			}
			owner[id] = r
		}
	}
	if len(owner) != n {
		t.Fatalf("relays claimed %d distinct events, want all %d", len(owner), n)
	}
	for _, id := range ids {
		if _, ok := owner[id]; !ok {
			t.Fatalf("event %s was never claimed", id)
		}
	}
	// The table agrees with what each relay was told it holds.
	for r := range relays {
		want := fmt.Sprintf("relay-%d", r)
		var got int
		if err := tb.Store.Pool().QueryRow(ctx, "SELECT count(*) FROM "+tb.Name+" WHERE status = 'DELIVERING' AND locked_by = $1", want).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != len(claimedBy[r]) {
			t.Errorf("%s holds %d rows in the table but claimed %d", want, got, len(claimedBy[r]))
		}
	}
}

// ---- Settling ---------------------------------------------------------------

func TestMarkDelivered(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	ids := tb.InsertN(t, 4, "e")
	b := claim(t, tb.Store, "relay-1", 3)
	claimed := eventIDs(b.Events)
	unclaimed := ids[3]

	before := time.Now()
	n, err := tb.Store.MarkDelivered(ctx, storage.SettleParams{
		Lease: b.Lease,
		// Two of the lease's rows, a row outside the lease and an unknown id.
		IDs: []uuid.UUID{claimed[0], claimed[1], unclaimed, uuid.New()},
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("MarkDelivered changed %d rows, want 2", n)
	}
	for _, id := range claimed[:2] {
		row := tb.Get(t, id)
		if row.Status != outbox.StatusDelivered || row.LockedBy != "" || !lockedAt(t, tb, id).IsZero() {
			t.Errorf("delivered row = %+v locked_at %s, want DELIVERED and unlocked", row, lockedAt(t, tb, id))
		}
		if row.DeliveredAt == nil || !within(*row.DeliveredAt, before, clockSlack) {
			t.Errorf("delivered_at = %v, want about %s", row.DeliveredAt, before)
		}
		if row.Attempts != 0 {
			t.Errorf("delivery counted an attempt: %+v", row)
		}
	}
	if row := tb.Get(t, claimed[2]); row.Status != outbox.StatusDelivering || row.LockedBy != "relay-1" || row.DeliveredAt != nil {
		t.Errorf("the lease's row not named was changed: %+v", row)
	}
	if row := tb.Get(t, unclaimed); row.Status != outbox.StatusPending || row.DeliveredAt != nil {
		t.Errorf("a PENDING row named in MarkDelivered was changed: %+v", row)
	}

	// Another relay's lease with the same instant changes nothing.
	other := storage.Lease{RelayID: "relay-2", LockedAt: b.Lease.LockedAt}
	if n, err := tb.Store.MarkDelivered(ctx, storage.SettleParams{Lease: other, IDs: claimed[2:]}); err != nil || n != 0 {
		t.Fatalf("MarkDelivered with relay-2's lease = %d, %v; want 0", n, err)
	}
	// Settling twice changes nothing either.
	if n, err := tb.Store.MarkDelivered(ctx, storage.SettleParams{Lease: b.Lease, IDs: claimed[:2]}); err != nil || n != 0 {
		t.Fatalf("second MarkDelivered = %d, %v; want 0", n, err)
	}
}

func TestMarkFailed(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	ids := tb.InsertN(t, 5, "e")
	// Earlier failures must be added to, not replaced.
	tb.Exec(t, "UPDATE {{table}} SET attempts = 2 WHERE event_id = $1", ids[1])
	b := claim(t, tb.Store, "relay-1", 4)
	retry, dead, untouched, unclaimed := ids[0], ids[1], ids[2], ids[4]
	deadAvailableAt := tb.Get(t, dead).AvailableAt

	const delay = 10 * time.Minute
	before := time.Now()
	n, err := tb.Store.MarkFailed(ctx, storage.FailParams{Lease: b.Lease, Failures: []storage.Failure{
		{ID: retry, Error: "broker said no", Delay: delay},
		{ID: dead, Error: "message too large", Dead: true},
		{ID: unclaimed, Error: "not leased", Dead: true},
		{ID: uuid.New(), Error: "unknown"},
	}})
	after := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("MarkFailed changed %d rows, want 2", n)
	}

	row := tb.Get(t, retry)
	if row.Status != outbox.StatusPending || row.Attempts != 1 || row.LastError != "broker said no" || row.LockedBy != "" {
		t.Errorf("retried row = %+v, want PENDING, 1 attempt, the error, unlocked", row)
	}
	if row.AvailableAt.Before(before.Add(delay-clockSlack)) || row.AvailableAt.After(after.Add(delay+clockSlack)) {
		t.Errorf("retried row available_at = %s, want about now + %s (%s)", row.AvailableAt, delay, before.Add(delay))
	}
	if b := claim(t, tb.Store, "relay-1", 10); slices.Contains(eventIDs(b.Events), retry) {
		t.Error("a row waiting out its retry delay was claimed at once")
	}

	row = tb.Get(t, dead)
	if row.Status != outbox.StatusDead || row.Attempts != 3 || row.LastError != "message too large" || row.LockedBy != "" {
		t.Errorf("dead row = %+v, want DEAD, 3 attempts, the error, unlocked", row)
	}
	if !row.AvailableAt.Equal(deadAvailableAt) {
		t.Errorf("dead row available_at moved from %s to %s", deadAvailableAt, row.AvailableAt)
	}

	if row := tb.Get(t, untouched); row.Status != outbox.StatusDelivering || row.Attempts != 0 || row.LastError != "" {
		t.Errorf("the lease's row not named was changed: %+v", row)
	}
	// ids[4] was claimed by the second claim above, after MarkFailed ran.
	if row := tb.Get(t, unclaimed); row.Attempts != 0 || row.LastError != "" {
		t.Errorf("a row outside the lease was marked failed: %+v", row)
	}
}

func TestMarkFailedWithoutDelayIsDueAtOnce(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	id := tb.InsertN(t, 1, "e")[0]
	b := claim(t, tb.Store, "relay-1", 1)
	if n, err := tb.Store.MarkFailed(ctx, storage.FailParams{Lease: b.Lease, Failures: []storage.Failure{{ID: id, Error: "x"}}}); err != nil || n != 1 {
		t.Fatalf("MarkFailed = %d, %v", n, err)
	}
	again := claim(t, tb.Store, "relay-1", 1)
	if len(again.Events) != 1 || again.Events[0].ID != id || again.Events[0].Attempts != 1 {
		t.Fatalf("reclaimed %+v, want the row with 1 attempt", again.Events)
	}
}

func TestMarkFailedStoresErrorsSafely(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		msg  string
		// want is the stored last_error; empty means check the truncation
		// rules instead.
		want string
	}{
		{name: "short", msg: "boom", want: "boom"},
		{name: "exactly the limit", msg: strings.Repeat("a", 2000), want: strings.Repeat("a", 2000)},
		{name: "one byte over", msg: strings.Repeat("a", 2001), want: strings.Repeat("a", 2000) + "…"},
		{name: "long ASCII", msg: strings.Repeat("broker error ", 1000)},
		// "x" shifts every two-byte rune so that byte 2000 falls inside one.
		{name: "long, cut inside a rune", msg: "x" + strings.Repeat("é", 1500)},
		{name: "long, four-byte runes", msg: strings.Repeat("🙂", 1000)},
		// Broker errors can quote binary data; PostgreSQL rejects text
		// that is not UTF-8 or holds NUL, which would fail the whole settle.
		{name: "invalid UTF-8", msg: "bad \xff\xfe bytes", want: "bad \ufffd bytes"},
		{name: "NUL byte", msg: "nul\x00here", want: "nul\ufffdhere"},
		{name: "long, invalid UTF-8", msg: strings.Repeat("a\xff", 1500)},
	}
	tb := pgtest.New(t)
	events := make([]pgtest.Event, len(tests))
	ids := tb.Insert(t, events...)
	b := claim(t, tb.Store, "relay-1", len(ids))
	failures := make([]storage.Failure, len(tests))
	for i, tt := range tests {
		failures[i] = storage.Failure{ID: ids[i], Error: tt.msg, Dead: true}
	}
	n, err := tb.Store.MarkFailed(ctx, storage.FailParams{Lease: b.Lease, Failures: failures})
	if err != nil {
		t.Fatalf("MarkFailed: %v", err)
	}
	if n != len(tests) {
		t.Fatalf("MarkFailed changed %d rows, want %d", n, len(tests))
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tb.Get(t, ids[i]).LastError
			if !utf8.ValidString(got) {
				t.Fatalf("stored error is not valid UTF-8: %q", got)
			}
			if tt.want != "" {
				if got != tt.want {
					t.Fatalf("stored error = %.80q… (%d bytes), want %.80q… (%d bytes)", got, len(got), tt.want, len(tt.want))
				}
				return
			}
			kept, ok := strings.CutSuffix(got, "…")
			if !ok {
				t.Fatalf("truncated error does not end with …: %.80q", got[max(0, len(got)-80):])
			}
			if len(kept) > 2000 || len(kept) < 1996 {
				t.Errorf("truncated error keeps %d bytes, want 1996-2000", len(kept))
			}
			if utf8.ValidString(tt.msg) && !strings.HasPrefix(tt.msg, kept) {
				t.Errorf("truncated error is not a prefix of the original")
			}
		})
	}
}

func TestRelease(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	ids := tb.InsertN(t, 3, "e")
	tb.Exec(t, "UPDATE {{table}} SET attempts = 1, last_error = 'earlier' WHERE event_id = $1", ids[0])
	availableAt := tb.Get(t, ids[0]).AvailableAt
	b := claim(t, tb.Store, "relay-1", 2)
	claimed := eventIDs(b.Events)

	n, err := tb.Store.Release(ctx, storage.SettleParams{Lease: b.Lease, IDs: []uuid.UUID{claimed[0], ids[2]}})
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("Release changed %d rows, want 1", n)
	}
	row := tb.Get(t, claimed[0])
	if row.Status != outbox.StatusPending || row.Attempts != 1 || row.LastError != "earlier" || row.LockedBy != "" {
		t.Errorf("released row = %+v, want PENDING with attempts and last_error unchanged, unlocked", row)
	}
	if !row.AvailableAt.Equal(availableAt) {
		t.Errorf("release moved available_at from %s to %s", availableAt, row.AvailableAt)
	}
	if !lockedAt(t, tb, claimed[0]).IsZero() {
		t.Error("released row keeps locked_at")
	}
	if row := tb.Get(t, claimed[1]); row.Status != outbox.StatusDelivering {
		t.Errorf("the lease's row not named was released: %+v", row)
	}

	// Released rows are due at once.
	again := claim(t, tb.Store, "relay-2", 10)
	if got := eventIDs(again.Events); !sameSet(got, []uuid.UUID{claimed[0], ids[2]}) {
		t.Fatalf("claim after release took %v, want %v and %v", got, claimed[0], ids[2])
	}
}

// ---- Lease guard ------------------------------------------------------------

func TestLateSettleFromATakenOverLeaseChangesNothing(t *testing.T) {
	t.Parallel()
	settles := []struct {
		name   string
		settle func(s *postgres.Store, l storage.Lease, id uuid.UUID) (int, error)
	}{
		{"MarkDelivered", func(s *postgres.Store, l storage.Lease, id uuid.UUID) (int, error) {
			return s.MarkDelivered(ctx, storage.SettleParams{Lease: l, IDs: []uuid.UUID{id}})
		}},
		{"MarkFailed retry", func(s *postgres.Store, l storage.Lease, id uuid.UUID) (int, error) {
			return s.MarkFailed(ctx, storage.FailParams{Lease: l, Failures: []storage.Failure{{ID: id, Error: "late", Delay: time.Second}}})
		}},
		{"MarkFailed dead", func(s *postgres.Store, l storage.Lease, id uuid.UUID) (int, error) {
			return s.MarkFailed(ctx, storage.FailParams{Lease: l, Failures: []storage.Failure{{ID: id, Error: "late", Dead: true}}})
		}},
		{"Release", func(s *postgres.Store, l storage.Lease, id uuid.UUID) (int, error) {
			return s.Release(ctx, storage.SettleParams{Lease: l, IDs: []uuid.UUID{id}})
		}},
	}
	for _, st := range settles {
		t.Run(st.name+"/other relay", func(t *testing.T) {
			t.Parallel()
			tb := pgtest.New(t)
			id := tb.InsertN(t, 1, "e")[0]
			a := claim(t, tb.Store, "relay-a", 1)
			expire(t, tb, time.Hour, id)
			if res := reap(t, tb, 10, 10); res.Requeued != 1 {
				t.Fatalf("Reap = %+v, want 1 requeued", res)
			}
			b := claim(t, tb.Store, "relay-b", 1)
			if len(b.Events) != 1 {
				t.Fatal("relay-b could not claim the reaped row")
			}

			n, err := st.settle(tb.Store, a.Lease, id)
			if err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Fatalf("late %s from relay-a changed %d rows, want 0", st.name, n)
			}
			row := tb.Get(t, id)
			if row.Status != outbox.StatusDelivering || row.LockedBy != "relay-b" || row.Attempts != 1 || !strings.Contains(row.LastError, "lease expired") {
				t.Fatalf("row after relay-a's late %s = %+v, want DELIVERING by relay-b, unchanged", st.name, row)
			}
			if at := lockedAt(t, tb, id); !at.Equal(b.Lease.LockedAt) {
				t.Fatalf("locked_at = %s, want relay-b's %s", at, b.Lease.LockedAt)
			}
			// relay-b's lease still settles.
			if n, err := st.settle(tb.Store, b.Lease, id); err != nil || n != 1 {
				t.Fatalf("%s with relay-b's lease = %d, %v; want 1", st.name, n, err)
			}
		})
		t.Run(st.name+"/other relay, same instant", func(t *testing.T) {
			t.Parallel()
			tb := pgtest.New(t)
			id := tb.InsertN(t, 1, "e")[0]
			a := claim(t, tb.Store, "relay-a", 1)
			// relay-b holds a lease taken in the very same microsecond:
			// only locked_by tells the two apart.
			tb.Exec(t, "UPDATE {{table}} SET locked_by = 'relay-b' WHERE event_id = $1", id)
			if n, err := st.settle(tb.Store, a.Lease, id); err != nil || n != 0 {
				t.Fatalf("%s with relay-a's lease on relay-b's row = %d, %v; want 0", st.name, n, err)
			}
			if row := tb.Get(t, id); row.Status != outbox.StatusDelivering || row.LockedBy != "relay-b" || row.Attempts != 0 {
				t.Fatalf("row = %+v, want DELIVERING by relay-b, unchanged", row)
			}
			b := storage.Lease{RelayID: "relay-b", LockedAt: a.Lease.LockedAt}
			if n, err := st.settle(tb.Store, b, id); err != nil || n != 1 {
				t.Fatalf("%s with relay-b's lease = %d, %v; want 1", st.name, n, err)
			}
		})
		t.Run(st.name+"/same relay", func(t *testing.T) {
			t.Parallel()
			tb := pgtest.New(t)
			id := tb.InsertN(t, 1, "e")[0]
			old := claim(t, tb.Store, "relay-a", 1)
			expire(t, tb, time.Hour, id)
			if res := reap(t, tb, 10, 10); res.Requeued != 1 {
				t.Fatalf("Reap = %+v, want 1 requeued", res)
			}
			current := claim(t, tb.Store, "relay-a", 1)
			if len(current.Events) != 1 {
				t.Fatal("relay-a could not claim the reaped row again")
			}
			if current.Lease.LockedAt.Equal(old.Lease.LockedAt) {
				t.Fatalf("the new claim got the old lease %v", old.Lease)
			}

			if n, err := st.settle(tb.Store, old.Lease, id); err != nil || n != 0 {
				t.Fatalf("%s with relay-a's expired lease = %d, %v; want 0", st.name, n, err)
			}
			if row := tb.Get(t, id); row.Status != outbox.StatusDelivering || row.LockedBy != "relay-a" || row.Attempts != 1 {
				t.Fatalf("row after the expired lease's %s = %+v, want DELIVERING, unchanged", st.name, row)
			}
			if n, err := st.settle(tb.Store, current.Lease, id); err != nil || n != 1 {
				t.Fatalf("%s with relay-a's current lease = %d, %v; want 1", st.name, n, err)
			}
		})
	}
}

// ---- Reap -------------------------------------------------------------------

func TestReap(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	ids := tb.InsertN(t, 6, "e")
	requeue, bury, fresh, almost, pending, delivered := ids[0], ids[1], ids[2], ids[3], ids[4], ids[5]
	tb.Exec(t, "UPDATE {{table}} SET attempts = 4 WHERE event_id = $1", bury)
	tb.Exec(t, "UPDATE {{table}} SET attempts = 2 WHERE event_id = $1", requeue)

	a := claim(t, tb.Store, "relay-a", 4) // requeue, bury, fresh, almost
	if got := eventIDs(a.Events); !sameSet(got, ids[:4]) {
		t.Fatalf("setup claimed %v", got)
	}
	expire(t, tb, time.Hour, requeue, bury)
	expire(t, tb, 30*time.Second, almost) // younger than the 1m timeout
	// A settled row that still has an old locked_at must not be reaped.
	tb.Exec(t, "UPDATE {{table}} SET status = 'DELIVERED', delivered_at = now(), locked_by = 'relay-a', locked_at = now() - interval '1 hour' WHERE event_id = $1", delivered)

	before := time.Now()
	res := reap(t, tb, 100, 5)
	if res != (storage.ReapResult{Requeued: 1, Dead: 1}) {
		t.Fatalf("Reap = %+v, want 1 requeued and 1 dead", res)
	}

	row := tb.Get(t, requeue)
	if row.Status != outbox.StatusPending || row.Attempts != 3 || row.LockedBy != "" {
		t.Errorf("requeued row = %+v, want PENDING with 3 attempts, unlocked", row)
	}
	if row.LastError != "lease expired (relay relay-a)" {
		t.Errorf("requeued row last_error = %q", row.LastError)
	}
	if row.AvailableAt.After(time.Now().Add(clockSlack)) || row.AvailableAt.Before(before.Add(-clockSlack)) {
		t.Errorf("requeued row available_at = %s, want now", row.AvailableAt)
	}
	row = tb.Get(t, bury)
	if row.Status != outbox.StatusDead || row.Attempts != 5 || row.LastError != "lease expired (relay relay-a)" || row.LockedBy != "" {
		t.Errorf("row reaching MaxAttempts = %+v, want DEAD with 5 attempts and the lease error", row)
	}
	for _, id := range []uuid.UUID{fresh, almost} {
		if row := tb.Get(t, id); row.Status != outbox.StatusDelivering || row.LockedBy != "relay-a" || row.Attempts != 0 || row.LastError != "" {
			t.Errorf("row with a live lease was reaped: %+v", row)
		}
	}
	if row := tb.Get(t, pending); row.Status != outbox.StatusPending || row.Attempts != 0 {
		t.Errorf("PENDING row was touched: %+v", row)
	}
	if row := tb.Get(t, delivered); row.Status != outbox.StatusDelivered || row.Attempts != 0 {
		t.Errorf("DELIVERED row was touched: %+v", row)
	}

	// The requeued row is due at once; the live leases still settle.
	if b := claim(t, tb.Store, "relay-b", 10); !sameSet(eventIDs(b.Events), []uuid.UUID{requeue, pending}) {
		t.Errorf("claim after reap took %v, want %v and %v", eventIDs(b.Events), requeue, pending)
	}
	if n, err := tb.Store.MarkDelivered(ctx, storage.SettleParams{Lease: a.Lease, IDs: []uuid.UUID{fresh}}); err != nil || n != 1 {
		t.Errorf("settling a lease the reaper left alone = %d, %v; want 1", n, err)
	}
	if res := reap(t, tb, 100, 5); res != (storage.ReapResult{}) {
		t.Errorf("second Reap = %+v, want nothing", res)
	}
}

func TestReapLimitTakesOldestLeasesFirst(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	ids := tb.InsertN(t, 10, "e")
	claim(t, tb.Store, "relay-a", 10)
	for i, id := range ids {
		// The last row written holds the oldest lease, so that neither
		// insertion nor heap order is the order leases expired in.
		expire(t, tb, time.Hour+time.Duration(i)*time.Minute, id)
	}

	var rounds [][]uuid.UUID
	for range 4 {
		before := tb.Counts(t)[outbox.StatusDelivering]
		res := reap(t, tb, 4, 100)
		if res.Dead != 0 {
			t.Fatalf("Reap sent %d rows DEAD below MaxAttempts", res.Dead)
		}
		if got := before - tb.Counts(t)[outbox.StatusDelivering]; got != res.Requeued {
			t.Fatalf("Reap reported %d requeued, the table shows %d", res.Requeued, got)
		}
		var round []uuid.UUID
		for _, id := range ids {
			if row := tb.Get(t, id); row.Status == outbox.StatusPending && !slices.ContainsFunc(rounds, func(r []uuid.UUID) bool { return slices.Contains(r, id) }) {
				round = append(round, id)
			}
		}
		rounds = append(rounds, round)
	}
	want := [][]uuid.UUID{ids[6:10], ids[2:6], ids[0:2], nil}
	for i := range want {
		if !sameSet(rounds[i], want[i]) {
			t.Errorf("reap %d took %v, want %v (Limit 4, oldest lease first)", i+1, rounds[i], want[i])
		}
	}
}

func TestReapWithMaxAttemptsOneBuriesAtOnce(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	ids := tb.InsertN(t, 3, "e")
	claim(t, tb.Store, "relay-a", 3)
	expire(t, tb, time.Hour, ids...)
	if res := reap(t, tb, 100, 1); res != (storage.ReapResult{Dead: 3}) {
		t.Fatalf("Reap = %+v, want 3 dead", res)
	}
	if c := tb.Counts(t); c[outbox.StatusDead] != 3 {
		t.Fatalf("counts = %v", c)
	}
}

// ---- Migrate ----------------------------------------------------------------

// newSchema creates an empty schema that is dropped when the test ends.
func newSchema(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "m_" + hex.EncodeToString(b)
	conn, err := pgx.Connect(ctx, pgtest.URL())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), pgtest.URL())
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "DROP SCHEMA "+name+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", name, err)
		}
	})
	return name
}

// open opens a store on table without migrating it.
func open(t *testing.T, table string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(ctx, storage.URLWithTable(pgtest.URL(), table))
	if err != nil {
		t.Fatalf("Open(%s): %v", table, err)
	}
	t.Cleanup(s.Close)
	return s
}

func exec(t *testing.T, s *postgres.Store, sql string, args ...any) {
	t.Helper()
	if _, err := s.Pool().Exec(ctx, sql, args...); err != nil {
		t.Fatalf("exec %q: %v", sql, err)
	}
}

// openOutboxDDL is the Open Outbox table as its own migrations create it:
// no seq column, no trigger, no relay indexes.
const openOutboxDDL = `CREATE TABLE %s (
    event_id      UUID PRIMARY KEY DEFAULT gen_random_uuid(),
    event_type    TEXT NOT NULL,
    partition_key TEXT,
    payload       BYTEA NOT NULL,
    headers       JSONB NOT NULL DEFAULT '{}',
    status        TEXT NOT NULL DEFAULT 'PENDING',
    attempts      INT NOT NULL DEFAULT 0,
    last_error    TEXT,
    available_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    locked_by     TEXT,
    locked_at     TIMESTAMPTZ,
    delivered_at  TIMESTAMPTZ,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT check_valid_status CHECK (status IN ('PENDING', 'DELIVERING', 'DELIVERED', 'DEAD'))
)`

func TestMigrateFreshSchema(t *testing.T) {
	t.Parallel()
	s := open(t, newSchema(t)+".outbox")

	first, err := s.Migrate(ctx)
	if err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	want := []string{
		"table outbox", "column seq", "sequence outbox_seq", "function outbox_notify()", "trigger outbox_notify",
		"index outbox_pkey", "index outbox_pending_idx", "index outbox_pending_age_idx",
		"index outbox_key_order_idx", "index outbox_key_dead_idx", "index outbox_unkeyed_idx", "index outbox_delivering_idx", "index outbox_delivered_idx", "index outbox_dead_idx",
	}
	if !sameStrings(first.Created, want) {
		t.Errorf("first Migrate created %q\nwant %q", first.Created, want)
	}
	if len(first.Existed) != 0 {
		t.Errorf("first Migrate found existing objects %q", first.Existed)
	}
	if err := s.Check(ctx); err != nil {
		t.Errorf("Check after Migrate: %v", err)
	}

	second, err := s.Migrate(ctx)
	if err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	if len(second.Created) != 0 {
		t.Errorf("second Migrate created %q", second.Created)
	}
	if !sameStrings(second.Existed, first.Created) {
		t.Errorf("second Migrate found %q, want %q", second.Existed, first.Created)
	}
}

func TestMigrateUnqualifiedTableUsesSearchPath(t *testing.T) {
	t.Parallel()
	sch := newSchema(t)
	u, err := url.Parse(storage.URLWithTable(pgtest.URL(), "my_outbox"))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", sch)
	u.RawQuery = q.Encode()
	s, err := postgres.Open(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)

	res, err := s.Migrate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(res.Created, "table my_outbox") || !slices.Contains(res.Created, "index my_outbox_pending_idx") {
		t.Errorf("Migrate created %q", res.Created)
	}
	var n int
	if err := s.Pool().QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = 'my_outbox'", sch).Scan(&n); err != nil || n != 1 {
		t.Fatalf("table in %s: %d, %v", sch, n, err)
	}
}

func TestMigrateAdoptsAnOpenOutboxTable(t *testing.T) {
	t.Parallel()
	table := newSchema(t) + ".openoutbox_events"
	s := open(t, table)
	exec(t, s, fmt.Sprintf(openOutboxDDL, table))
	old := uuid.New()
	exec(t, s, "INSERT INTO "+table+" (event_id, event_type, payload) VALUES ($1, 'old.event', '\\x01')", old)
	history := uuid.New()
	exec(t, s, "INSERT INTO "+table+" (event_id, event_type, payload, status, delivered_at) VALUES ($1, 'done.event', '\\x00', 'DELIVERED', now())", history)

	if err := s.Check(ctx); err == nil || !strings.Contains(err.Error(), "seq") {
		t.Fatalf("Check before Migrate = %v, want it to name the missing seq column", err)
	}
	res, err := s.Migrate(ctx)
	if err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	for _, obj := range []string{"column seq", "trigger openoutbox_events_notify", "index openoutbox_events_pending_idx"} {
		if !slices.Contains(res.Created, obj) {
			t.Errorf("Migrate did not report creating %q: created %q", obj, res.Created)
		}
	}
	for _, obj := range []string{"table openoutbox_events", "index openoutbox_events_pkey"} {
		if !slices.Contains(res.Existed, obj) {
			t.Errorf("Migrate did not report %q as existing: existed %q", obj, res.Existed)
		}
	}
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check after Migrate: %v", err)
	}

	// A producer that knows only the Open Outbox columns still inserts.
	newer := uuid.New()
	exec(t, s, "INSERT INTO "+table+" (event_id, event_type, partition_key, payload, headers) VALUES ($1, 'new.event', 'k', '\\x02', '{\"a\":\"b\"}')", newer)
	var oldSeq, newSeq, historySeq *int64
	if err := s.Pool().QueryRow(ctx, "SELECT (SELECT seq FROM "+table+" WHERE event_id = $1), (SELECT seq FROM "+table+" WHERE event_id = $2), (SELECT seq FROM "+table+" WHERE event_id = $3)",
		old, newer, history).Scan(&oldSeq, &newSeq, &historySeq); err != nil {
		t.Fatal(err)
	}
	// Unfinished rows are numbered once, so ordered claims can compare
	// seq; delivered history is left alone (no rewrite of the table).
	if oldSeq == nil {
		t.Error("the existing PENDING row got no seq")
	}
	if historySeq != nil {
		t.Errorf("the delivered row got seq %d; history must be left alone", *historySeq)
	}
	if newSeq == nil || (oldSeq != nil && *newSeq <= *oldSeq) {
		t.Errorf("a new row got seq %v, want one after the existing row's %v", newSeq, oldSeq)
	}

	b := claim(t, s, "relay-1", 10)
	if got := eventIDs(b.Events); !slices.Equal(got, []uuid.UUID{old, newer}) {
		t.Fatalf("claimed %v, want the existing row then the new one %v", got, []uuid.UUID{old, newer})
	}
	if b.Events[0].Type != "old.event" || string(b.Events[0].Payload) != "\x01" {
		t.Errorf("existing row came back as %+v", b.Events[0])
	}
}

func TestConcurrentMigrationsAllSucceed(t *testing.T) {
	t.Parallel()
	table := newSchema(t) + ".outbox"
	const n = 4
	stores := make([]*postgres.Store, n)
	for i := range stores {
		stores[i] = open(t, table)
	}
	results := make([]storage.MigrateResult, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { results[i], errs[i] = stores[i].Migrate(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent Migrate: %v", err)
	}
	creators := 0
	for _, r := range results {
		if slices.Contains(r.Created, "table outbox") {
			creators++
		}
	}
	if creators != 1 {
		t.Errorf("%d migrations report creating the table, want 1", creators)
	}
}

func TestInsertNotifiesTheChannel(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	channel := tb.Name // the trigger notifies on the schema-qualified name
	conn, err := pgx.Connect(ctx, pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `LISTEN "`+channel+`"`); err != nil {
		t.Fatal(err)
	}

	tb.InsertN(t, 3, "e")

	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := conn.WaitForNotification(waitCtx)
	if err != nil {
		t.Fatalf("no notification after an INSERT: %v", err)
	}
	if n.Channel != channel {
		t.Errorf("notification on %q, want %q", n.Channel, channel)
	}
}

func TestSchemaSQLIsWhatMigrateApplies(t *testing.T) {
	t.Parallel()
	s := open(t, "app.outbox")
	if got, want := s.SchemaSQL(), schema.Render(schema.Table{Schema: "app", Name: "outbox"}); got != want {
		t.Errorf("SchemaSQL() differs from schema.Render")
	}
}

// ---- Check ------------------------------------------------------------------

func TestCheck(t *testing.T) {
	t.Parallel()
	t.Run("migrated table", func(t *testing.T) {
		t.Parallel()
		tb := pgtest.New(t)
		if err := tb.Store.Check(ctx); err != nil {
			t.Fatalf("Check: %v", err)
		}
	})
	for _, table := range []string{"no_such_table", "no_such_schema_x1.outbox"} {
		t.Run("missing "+table, func(t *testing.T) {
			t.Parallel()
			s := open(t, table)
			err := s.Check(ctx)
			if !errors.Is(err, storage.ErrTableMissing) {
				t.Fatalf("Check = %v, want ErrTableMissing", err)
			}
			if !strings.Contains(err.Error(), "`relay-cli migrate`") || !strings.Contains(err.Error(), table) {
				t.Errorf("error %q does not name the table and `relay-cli migrate`", err)
			}
		})
	}
	t.Run("missing columns", func(t *testing.T) {
		t.Parallel()
		table := newSchema(t) + ".partial"
		s := open(t, table)
		exec(t, s, "CREATE TABLE "+table+" (event_id uuid PRIMARY KEY, event_type text, payload bytea, status text)")
		err := s.Check(ctx)
		if err == nil {
			t.Fatal("Check accepted a table without most columns")
		}
		if errors.Is(err, storage.ErrTableMissing) {
			t.Errorf("Check = %v; the table exists", err)
		}
		for _, col := range []string{"partition_key", "headers", "attempts", "locked_by", "updated_at", "seq"} {
			if !strings.Contains(err.Error(), col) {
				t.Errorf("error %q does not name missing column %s", err, col)
			}
		}
		for _, col := range []string{"event_id", "event_type", "payload"} {
			if strings.Contains(err.Error(), col) {
				t.Errorf("error %q names %s, which exists", err, col)
			}
		}
	})
}

func TestUnreachableDatabaseErrorsHideThePassword(t *testing.T) {
	t.Parallel()
	s, err := postgres.Open(ctx, "postgres://relay:"+password+"@127.0.0.1:1/app?sslmode=disable&connect_timeout=5")
	if err != nil {
		t.Fatalf("Open must not connect: %v", err)
	}
	t.Cleanup(s.Close)

	errs := map[string]error{"Check": s.Check(ctx)}
	_, errs["Migrate"] = s.Migrate(ctx)
	_, errs["Claim"] = s.Claim(ctx, storage.ClaimParams{RelayID: "r", Limit: 1})
	_, errs["Reap"] = s.Reap(ctx, storage.ReapParams{LeaseTimeout: time.Minute, Limit: 1, MaxAttempts: 1})
	for op, err := range errs {
		if err == nil {
			t.Errorf("%s on port 1 succeeded", op)
			continue
		}
		if strings.Contains(err.Error(), password) {
			t.Errorf("%s error leaks the password: %v", op, err)
		}
	}
	for _, op := range []string{"Check", "Migrate"} {
		msg := errs[op].Error()
		if !strings.Contains(msg, "cannot reach PostgreSQL") || !strings.Contains(msg, "127.0.0.1:1") || !strings.Contains(msg, `"relay"`) {
			t.Errorf("%s error %q does not say which server could not be reached", op, msg)
		}
	}
}

func TestLoginFailuresNameTheLoginNotTheTable(t *testing.T) {
	t.Parallel()
	base, err := url.Parse(pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		edit func(u *url.URL)
		want string
	}{
		{"unknown user", func(u *url.URL) { u.User = url.UserPassword("no_such_role_x1", password) },
			`refused the login of user "no_such_role_x1"`},
		{"missing database", func(u *url.URL) { u.Path = "/no_such_database_x1" },
			`has no database "no_such_database_x1"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u := *base
			tt.edit(&u)
			s, err := postgres.Open(ctx, storage.URLWithTable(u.String(), "openoutbox_events"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Close)
			err = s.Check(ctx)
			if !errors.Is(err, storage.ErrUnreachable) {
				t.Fatalf("Check = %v, want an error matching ErrUnreachable", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.want) || !strings.Contains(msg, "STORAGE_URL") {
				t.Errorf("Check = %q, want it to say %q and name STORAGE_URL", msg, tt.want)
			}
			if strings.Contains(msg, "openoutbox_events") || strings.Contains(msg, password) {
				t.Errorf("Check = %q: mentions the table or the password", msg)
			}
		})
	}
}

// ---- Open -------------------------------------------------------------------

func TestOpenRejectsInvalidTableNames(t *testing.T) {
	t.Parallel()
	for _, table := range []string{
		"x;drop table y",
		"Upper",
		strings.Repeat("a", 46),
		"a.b.c",
		`a"b`,
		"1abc",
		"app.",
	} {
		s, err := postgres.Open(ctx, storage.URLWithTable(pgtest.URL(), table))
		if err == nil {
			s.Close()
			t.Errorf("Open accepted table %q", table)
			continue
		}
		if !strings.Contains(err.Error(), "invalid table name") {
			t.Errorf("Open with table %q: %v, want an invalid table name error", table, err)
		}
	}
}

func TestOpenErrorsHideThePassword(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"postgres://relay:" + password + "@db:notaport/app",
		"postgres://relay:" + password + "@[::1/app",
		"postgres://relay:" + password + "@db/app?sslmode=bogus",
		"postgres://relay:" + password + "@db/app?pool_max_conns=many",
		"postgres://relay:" + password + "@db/app?connect_timeout=soon",
		"postgres://relay:Sup3r@S3cretPW@db:notaport/app",
		"postgres://relay@azure:Sup3rS3cretPW@db:notaport/app",
		"postgres://relay:" + url.QueryEscape("Sup3r S3cretPW") + "@db/app?sslmode=bogus",
		"postgres://db/app?password=" + password + "&sslmode=bogus",
	} {
		s, err := postgres.Open(ctx, raw)
		if err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded", raw)
			continue
		}
		if strings.Contains(err.Error(), "S3cretPW") {
			t.Errorf("Open error leaks the password: %v", err)
		}
	}
}

func TestOpenDefaults(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)

	s, err := postgres.Open(ctx, pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.Table(); got != schema.DefaultTable {
		t.Errorf("default table = %q, want %q", got, schema.DefaultTable)
	}
	if got := s.Pool().Config().MaxConns; got != postgres.DefaultPoolMaxConns {
		t.Errorf("pool size = %d, want %d", got, postgres.DefaultPoolMaxConns)
	}
	if got := s.Pool().Config().ConnConfig.ConnectTimeout; got != postgres.ConnectTimeoutDefault {
		t.Errorf("connect timeout = %s, want %s (a silent server must not hang a start)", got, postgres.ConnectTimeoutDefault)
	}
	// The table parameter is the relay's, not a server setting: a
	// connection made with it works.
	var app string
	if err := tb.Store.Pool().QueryRow(ctx, "SHOW application_name").Scan(&app); err != nil {
		t.Fatal(err)
	}
	if app != "outbox-relay" {
		t.Errorf("application_name = %q, want outbox-relay", app)
	}

	custom, err := postgres.Open(ctx, pgtest.URL()+"&pool_max_conns=3&application_name=mine&connect_timeout=3")
	if err != nil {
		t.Fatal(err)
	}
	defer custom.Close()
	if got := custom.Pool().Config().MaxConns; got != 3 {
		t.Errorf("pool_max_conns=3 gave %d", got)
	}
	if got := custom.Pool().Config().ConnConfig.ConnectTimeout; got != 3*time.Second {
		t.Errorf("connect_timeout=3 gave %s", got)
	}
	if err := custom.Pool().QueryRow(ctx, "SHOW application_name").Scan(&app); err != nil || app != "mine" {
		t.Errorf("application_name = %q, %v; want mine", app, err)
	}
}

func TestStorageOpenChoosesPostgres(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	for _, scheme := range []string{"postgres", "postgresql"} {
		raw := scheme + strings.TrimPrefix(tb.URL, "postgres")
		s, err := storage.Open(ctx, raw)
		if err != nil {
			t.Fatalf("storage.Open(%s): %v", scheme, err)
		}
		if _, ok := s.(*postgres.Store); !ok {
			t.Errorf("storage.Open(%s) = %T", scheme, s)
		}
		if err := s.Check(ctx); err != nil {
			t.Errorf("%s store Check: %v", scheme, err)
		}
		s.Close()
	}
	if _, err := storage.Open(ctx, "mysql://u:"+password+"@db/app"); err == nil || strings.Contains(err.Error(), password) || !strings.Contains(err.Error(), "postgres://") {
		t.Errorf("unknown scheme: %v, want an error listing postgres:// without the password", err)
	}
}

func TestURLWithTable(t *testing.T) {
	t.Parallel()
	tests := []struct{ raw, table, want string }{
		{"postgres://db/app", "app.outbox", "postgres://db/app?table=app.outbox"},
		{"postgres://db/app?sslmode=disable", "outbox", "postgres://db/app?sslmode=disable&table=outbox"},
		{"postgres://db/app?table=mine", "outbox", "postgres://db/app?table=mine"},
		{"postgres://db/app", "", "postgres://db/app"},
	}
	for _, tt := range tests {
		got := storage.URLWithTable(tt.raw, tt.table)
		gu, err1 := url.Parse(got)
		wu, err2 := url.Parse(tt.want)
		if err1 != nil || err2 != nil || gu.Host != wu.Host || gu.Path != wu.Path || !maps.EqualFunc(gu.Query(), wu.Query(), slices.Equal) {
			t.Errorf("URLWithTable(%q, %q) = %q, want %q", tt.raw, tt.table, got, tt.want)
		}
	}
}

func sameSet(a, b []uuid.UUID) bool {
	return sameStrings(toStrings(a), toStrings(b))
}

func toStrings[T fmt.Stringer](xs []T) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = x.String()
	}
	return out
}

func sameStrings[T ~string](a, b []T) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func TestRenewMovesRowsToANewLease(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	ctx := context.Background()
	ids := tb.InsertN(t, 3, "renew")
	b, err := tb.Store.Claim(ctx, storage.ClaimParams{RelayID: "r", Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	old := b.Lease
	to := old.LockedAt.Add(20 * time.Second)

	n, err := tb.Store.Renew(ctx, storage.RenewParams{Lease: old, IDs: ids[:2], To: to})
	if err != nil || n != 2 {
		t.Fatalf("Renew = %d, %v; want 2 rows", n, err)
	}
	// A renewal whose answer was lost is repeated with both stamps.
	unsure := old
	unsure.Unconfirmed = []time.Time{to}
	if n, err := tb.Store.Renew(ctx, storage.RenewParams{Lease: unsure, IDs: ids[:2], To: to}); err != nil || n != 2 {
		t.Fatalf("repeating the renewal = %d, %v; want the same 2 rows", n, err)
	}
	renewed := storage.Lease{RelayID: "r", LockedAt: to}
	if n, _ := tb.Store.MarkDelivered(ctx, storage.SettleParams{Lease: old, IDs: ids}); n != 1 {
		t.Fatalf("the old lease settled %d rows, want only the one not renewed", n)
	}
	if n, _ := tb.Store.MarkDelivered(ctx, storage.SettleParams{Lease: renewed, IDs: ids}); n != 2 {
		t.Fatalf("the new lease settled %d rows, want 2", n)
	}
	if n, err := tb.Store.Renew(ctx, storage.RenewParams{Lease: renewed, IDs: ids, To: to.Add(time.Second)}); err != nil || n != 0 {
		t.Fatalf("renewing settled rows = %d, %v; want 0", n, err)
	}
}

func TestSettleAcceptsAnyStampARenewalMayHaveSet(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	ctx := context.Background()
	ids := tb.InsertN(t, 1, "unsure")
	b, err := tb.Store.Claim(ctx, storage.ClaimParams{RelayID: "r", Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	to := b.Lease.LockedAt.Add(time.Minute)
	// The renewal lands, but its answer is lost.
	if _, err := tb.Store.Renew(ctx, storage.RenewParams{Lease: b.Lease, IDs: ids, To: to}); err != nil {
		t.Fatal(err)
	}
	if n, _ := tb.Store.MarkDelivered(ctx, storage.SettleParams{Lease: b.Lease, IDs: ids}); n != 0 {
		t.Fatalf("the stale lease alone settled %d rows", n)
	}
	unsure := b.Lease
	unsure.Unconfirmed = []time.Time{to}
	if n, err := tb.Store.MarkDelivered(ctx, storage.SettleParams{Lease: unsure, IDs: ids}); err != nil || n != 1 {
		t.Fatalf("settling with both stamps = %d, %v; want 1", n, err)
	}
}

// TestListenHearsInsertsHoweverTheTableIsSpelt: a relay configured with the
// bare table name (found through search_path) and one with the
// schema-qualified name listen on the same channel.
func TestListenHearsInsertsHoweverTheTableIsSpelt(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	schemaName, table, _ := strings.Cut(tb.Name, ".")
	bare, err := postgres.Open(context.Background(), storage.URLWithTable(pgtest.URL()+"&search_path="+schemaName, table))
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	if err := bare.Check(context.Background()); err != nil {
		t.Fatalf("the bare name does not resolve through search_path: %v", err)
	}

	heard := make(chan struct{}, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- bare.Listen(ctx, func() { heard <- struct{}{} }) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Listen: %v", err)
		}
	}()
	select { // the announcement Listen makes once it listens
	case <-heard:
	case <-time.After(10 * time.Second):
		t.Fatal("Listen never started")
	}
	tb.InsertN(t, 1, "spelt") // through the qualified name
	select {
	case <-heard:
	case err := <-done:
		t.Fatalf("Listen ended: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("an insert through the qualified name did not reach a listener using the bare name")
	}
}

// TestMigrateOfAMigratedTableBlocksNoWriter: with nothing to create,
// migrate takes no table lock, so it neither waits behind a long
// transaction nor makes inserts queue behind it.
func TestMigrateOfAMigratedTableBlocksNoWriter(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	ctx := context.Background()
	reader, err := tb.Store.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = reader.Rollback(ctx) }()
	// A long-running transaction that read the table holds a lock that
	// ALTER TABLE or CREATE INDEX would have to wait for.
	if _, err := reader.Exec(ctx, "SELECT count(*) FROM "+tb.Name); err != nil {
		t.Fatal(err)
	}
	quick, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := tb.Store.Migrate(quick)
	if err != nil {
		t.Fatalf("migrating a migrated table waited behind a reader: %v", err)
	}
	if len(res.Created) != 0 {
		t.Fatalf("created %v on a migrated table", res.Created)
	}
}
