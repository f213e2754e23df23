package storagetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
)

// Unordered claims: which rows, how many, in what order, with what
// contents, and never one row twice.

func testClaimTakesAtMostLimitDueRows(t *testing.T, h Harness) {
	tb := h.New(t)
	s := tb.Storage()
	due := insertN(t, tb, 5, "due")
	later := insert(t, tb, event{Type: "later", AvailableIn: time.Hour})[0]

	first := claim(t, s, "relay-1", 3)
	if len(first.Events) != 3 {
		t.Fatalf("first claim with Limit 3 took %d events", len(first.Events))
	}
	second := claim(t, s, "relay-1", 10)
	if len(second.Events) != 2 {
		t.Fatalf("second claim took %d events, want the 2 due rows left", len(second.Events))
	}
	if third := claim(t, s, "relay-1", 10); len(third.Events) != 0 {
		t.Fatalf("third claim took %v, want nothing: the only PENDING row is not due", eventIDs(third.Events))
	}

	claimed := append(eventIDs(first.Events), eventIDs(second.Events)...)
	if !slices.Equal(claimed, due) {
		t.Fatalf("claimed %v, want the due rows oldest first %v", claimed, due)
	}
	rows := byID(t, tb)
	for _, b := range []storage.Batch{first, second} {
		if b.Lease.RelayID != "relay-1" {
			t.Errorf("Lease.RelayID = %q", b.Lease.RelayID)
		}
		if !within(b.Lease.LockedAt, time.Now(), clockSlack) {
			t.Errorf("Lease.LockedAt = %s, want about now", b.Lease.LockedAt)
		}
		for _, e := range b.Events {
			row := rows[e.ID]
			if row.Status != outbox.StatusDelivering || str(row.LockedBy) != "relay-1" {
				t.Errorf("claimed row %s: status %s locked_by %q, want DELIVERING by relay-1", e.ID, row.Status, str(row.LockedBy))
			}
			// The lease stamp is what the row holds, to the microsecond:
			// every settle compares them.
			if at := lockedAt(row); !at.Equal(b.Lease.LockedAt) {
				t.Errorf("row %s locked_at %s != Lease.LockedAt %s", e.ID, at, b.Lease.LockedAt)
			}
		}
	}
	if row := rows[later]; row.Status != outbox.StatusPending || row.LockedBy != nil || row.LockedAt != nil {
		t.Errorf("row available in an hour was touched: %+v", row)
	}
}

func testClaimStopsAtMaxBytes(t *testing.T, h Harness) {
	for _, ordering := range []storage.Ordering{storage.OrderingNone, storage.OrderingPartition} {
		t.Run(string(ordering), func(t *testing.T) {
			t.Parallel()
			tb := h.New(t)
			s := tb.Storage()
			big := func(n int) event {
				return event{PartitionKey: "k", Payload: []byte(strings.Repeat("p", n))}
			}
			// 400 + 400 + 100 KB fit in 1 MB with their headers; the
			// next 400 KB do not.
			ids := insert(t, tb, big(400_000), big(400_000), big(100_000), big(400_000), big(10))
			p := storage.ClaimParams{RelayID: "r", Limit: 100, MaxBytes: 1_000_000, Ordering: ordering}
			b, err := s.Claim(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(eventIDs(b.Events), ids[:3]) {
				t.Fatalf("claimed %d events, want the first 3 (900 KB of 1 MB)", len(b.Events))
			}
			if b.Bytes() > p.MaxBytes {
				t.Errorf("batch holds %d bytes, over MaxBytes %d", b.Bytes(), p.MaxBytes)
			}
			if !b.Full {
				t.Errorf("a batch its byte limit cut with events left says Full false: the relay would wait for its next poll")
			}

			// An event larger than the limit still goes, alone (once its
			// key's earlier events are done, for ordered claims).
			if _, err := s.Settle(context.Background(), b.Lease, storage.Outcome{Delivered: eventIDs(b.Events)}); err != nil {
				t.Fatal(err)
			}
			p.MaxBytes = 100_000
			b, err = s.Claim(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			if len(b.Events) != 1 || b.Events[0].ID != ids[3] {
				t.Fatalf("claimed %v, want the 400 KB event alone", eventIDs(b.Events))
			}
			if _, err := s.Settle(context.Background(), b.Lease, storage.Outcome{Delivered: eventIDs(b.Events)}); err != nil {
				t.Fatal(err)
			}
			if b, err = s.Claim(context.Background(), p); err != nil || len(b.Events) != 1 || b.Full {
				t.Fatalf("the last claim = %v, full %v, %v; want the last event, not full", eventIDs(b.Events), b.Full, err)
			}
		})
	}
}

func testClaimTakesOnlyPendingRows(t *testing.T, h Harness) {
	tb := h.New(t)
	ids := insertN(t, tb, 4, "e")
	tb.Set(t, Change{Status: outbox.StatusDelivered, DeliveredAt: Ago(0)}, ids[0])
	tb.Set(t, Change{Status: outbox.StatusDead}, ids[1])
	tb.Set(t, Change{Status: outbox.StatusDelivering, LockedBy: Ptr("other"), LockedAt: Ago(0)}, ids[2])

	b := claim(t, tb.Storage(), "relay-1", 10)
	if got := eventIDs(b.Events); !slices.Equal(got, ids[3:]) {
		t.Fatalf("claimed %v, want only the PENDING row %v", got, ids[3])
	}
	if row := rowOf(t, tb, ids[2]); str(row.LockedBy) != "other" {
		t.Errorf("another relay's lease was taken: %+v", row)
	}
}

func testClaimKeepsInsertionOrderWithinAStatement(t *testing.T, h Harness) {
	tb := h.New(t)
	const n = 50
	events := make([]event, n)
	for i := range events {
		// Later rows become available earlier, so that neither the pickup
		// order nor available_at matches the order they were written in.
		events[i] = event{Type: "ordered", AvailableIn: -time.Duration(i) * time.Millisecond}
	}
	// Nor do the event ids: each is smaller than the one before.
	for i := range events {
		events[n-1-i].ID = uuid.Must(uuid.NewV7())
	}
	ids := insert(t, tb, events...)
	// Give every row the same created_at, so that only the insertion
	// order can tell them apart, and touch every third row, so that a
	// table scan does not return them in insertion order either.
	tb.Set(t, Change{CreatedAt: Ago(time.Minute)}, ids...)
	var third []uuid.UUID
	for i := 0; i < n; i += 3 {
		third = append(third, ids[i])
	}
	tb.Set(t, Change{UpdatedAt: Ago(0)}, third...)

	b := claim(t, tb.Storage(), "relay-1", n)
	if got := eventIDs(b.Events); !slices.Equal(got, ids) {
		t.Fatalf("claimed in order\n%v\nwant insertion order\n%v", got, ids)
	}
}

func testClaimOrdersByInsertionNotCreatedAt(t *testing.T, h Harness) {
	tb := h.New(t)
	// Written first, but stamped later; then written second and stamped an
	// hour earlier: a producer whose transaction began first and wrote
	// last. Write order is what the broker must see.
	first := insert(t, tb, event{}, event{})
	second := insert(t, tb, event{}, event{}, event{})
	tb.Set(t, Change{CreatedAt: Ago(time.Hour)}, second...)

	b := claim(t, tb.Storage(), "relay-1", 10)
	want := append(slices.Clone(first), second...)
	if got := eventIDs(b.Events); !slices.Equal(got, want) {
		t.Fatalf("claimed in order\n%v\nwant insertion order, whatever created_at says\n%v", got, want)
	}
}

func testClaimReturnsRowContents(t *testing.T, h Harness) {
	tb := h.New(t)
	binary := []byte{0x00, 0xff, 0xfe, 'o', 'k', 0x80}
	ids := insert(t, tb,
		event{Type: "order.created", PartitionKey: "customer-42", Payload: binary,
			Headers: `{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","amount":1.50,"vip":true,"none":null}`},
		event{Type: "order.deleted", Payload: []byte(`{"id":1}`)},
		event{Type: "empty", Payload: []byte{}},
	)
	tb.Set(t, Change{Attempts: Ptr(3)}, ids[0])
	rows := byID(t, tb)

	b := claim(t, tb.Storage(), "relay-1", 10)
	if len(b.Events) != 3 {
		t.Fatalf("claimed %d events, want 3", len(b.Events))
	}
	got := map[uuid.UUID]outbox.Event{}
	for _, e := range b.Events {
		got[e.ID] = e
	}

	keyed := got[ids[0]]
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
	if !keyed.CreatedAt.Equal(rows[ids[0]].CreatedAt) {
		t.Errorf("CreatedAt = %s, want the row's %s", keyed.CreatedAt, rows[ids[0]].CreatedAt)
	}

	unkeyed := got[ids[1]]
	if unkeyed.PartitionKey != "" {
		t.Errorf("NULL partition_key came back as %q, want empty", unkeyed.PartitionKey)
	}
	if unkeyed.Attempts != 0 || string(unkeyed.Payload) != `{"id":1}` {
		t.Errorf("unkeyed event = %+v", unkeyed)
	}
	if h, err := outbox.ParseHeaders(unkeyed.Headers); err != nil || len(h) != 0 {
		t.Errorf("default headers %s parse to %q, %v; want none", unkeyed.Headers, h, err)
	}
	if p := got[ids[2]].Payload; len(p) != 0 {
		t.Errorf("an empty payload came back as %q", p)
	}
}

func testClaimSkipsRowsLockedByAnotherClaim(t *testing.T, h Harness) {
	tb := h.New(t)
	ids := insertN(t, tb, 3, "e")
	unlock := tb.Lock(t, ids[0])

	claimCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	b, err := tb.Storage().Claim(claimCtx, storage.ClaimParams{RelayID: "relay-1", Limit: 10})
	if err != nil {
		t.Fatalf("Claim waited for the locked row instead of skipping it: %v", err)
	}
	if got := eventIDs(b.Events); !slices.Equal(got, ids[1:]) {
		t.Fatalf("claimed %v, want the unlocked rows %v", got, ids[1:])
	}
	unlock()
	if b := claim(t, tb.Storage(), "relay-1", 10); !slices.Equal(eventIDs(b.Events), ids[:1]) {
		t.Fatalf("after the lock was released claimed %v, want %v", eventIDs(b.Events), ids[0])
	}
}

// openSecond opens another storage on tb's table, as a second relay would,
// closed when t ends.
func openSecond(t testing.TB, tb Table) storage.Storage {
	t.Helper()
	s, err := storage.Open(ctx, tb.URL())
	if err != nil {
		t.Fatalf("storage.Open(%s): %v", tb.URL(), err)
	}
	t.Cleanup(s.Close)
	return s
}

func testConcurrentClaimsNeverShareAnEvent(t *testing.T, h Harness) {
	tb := h.New(t)
	const n, relays, batch = 2000, 4, 50
	ids := insertN(t, tb, n, "shared")
	// Two stores, as two relay processes have, each with two claimers.
	stores := []storage.Storage{tb.Storage(), openSecond(t, tb)}

	claimedBy := make([][]uuid.UUID, relays)
	errs := make([]error, relays)
	var wg sync.WaitGroup
	for r := range relays {
		wg.Go(func() {
			s := stores[r%len(stores)]
			for {
				b, err := s.Claim(ctx, storage.ClaimParams{RelayID: fmt.Sprintf("relay-%d", r), Limit: batch})
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
	// The table agrees with what each relay was told it holds.
	rows := byID(t, tb)
	for _, id := range ids {
		r, ok := owner[id]
		if !ok {
			t.Fatalf("event %s was never claimed", id)
		}
		row := rows[id]
		if want := fmt.Sprintf("relay-%d", r); row.Status != outbox.StatusDelivering || str(row.LockedBy) != want {
			t.Fatalf("event %s is %s held by %q, but %s claimed it", id, row.Status, str(row.LockedBy), want)
		}
	}
}
