package storagetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
)

// Ordered claims (ORDERING=partition): an event is claimed only when every
// earlier event with its key is finished, a key's events as a run in
// order, keys walked bytewise from the cursor.

func claimOrdered(t testing.TB, s storage.Queue, onDead storage.DeadPolicy, after string, limit int) storage.Batch {
	t.Helper()
	b, err := s.Claim(ctx, storage.ClaimParams{RelayID: "relay-1", Limit: limit,
		Ordering: storage.OrderingPartition, OnDead: onDead, After: after})
	if err != nil {
		t.Fatalf("ordered Claim(%s, after %q, limit %d): %v", onDead, after, limit, err)
	}
	return b
}

func deliver(t testing.TB, s storage.Queue, b storage.Batch, ids ...uuid.UUID) {
	t.Helper()
	if ids == nil {
		ids = eventIDs(b.Events)
	}
	if n, err := s.Settle(ctx, b.Lease, storage.Outcome{Delivered: ids}); err != nil || n.Delivered != len(ids) {
		t.Fatalf("Settle(%v) = %d, %v", ids, n.Delivered, err)
	}
}

func testOrderedClaimHoldsAKeyUntilItsEarlierEventsFinish(t *testing.T, h Harness) {
	tb := h.New(t)
	s := tb.Storage()
	first := insert(t, tb,
		event{PartitionKey: "A"}, event{PartitionKey: "B"}, event{}, event{PartitionKey: "A"},
		event{PartitionKey: "B"}, event{}, event{PartitionKey: "A"},
	)
	a, b := []uuid.UUID{first[0], first[3], first[6]}, []uuid.UUID{first[1], first[4]}

	// Every key's run and the unkeyed events, oldest first, under one lease.
	all := claimOrdered(t, s, storage.DeadSkip, "", 100)
	if got := eventIDs(all.Events); !slices.Equal(got, first) {
		t.Fatalf("first ordered claim took %v, want every event in insertion order %v", got, first)
	}
	rows := byID(t, tb)
	for _, id := range first {
		if r := rows[id]; r.Status != outbox.StatusDelivering || !lockedAt(r).Equal(all.Lease.LockedAt) || str(r.LockedBy) != "relay-1" {
			t.Errorf("claimed row = %s, want DELIVERING under the lease %v", describe(r), all.Lease)
		}
	}

	// Later events of keys in flight wait; unkeyed events never do.
	second := insert(t, tb, event{PartitionKey: "A"}, event{PartitionKey: "B"}, event{})
	if got := eventIDs(claimOrdered(t, s, storage.DeadSkip, "", 100).Events); !slices.Equal(got, second[2:]) {
		t.Fatalf("with keys A and B in flight the claim took %v, want only the unkeyed %v", got, second[2])
	}

	deliver(t, s, all, a...)
	if got := eventIDs(claimOrdered(t, s, storage.DeadSkip, "", 100).Events); !slices.Equal(got, second[:1]) {
		t.Fatalf("after A's run was delivered the claim took %v, want A's next event %v", got, second[0])
	}

	// B's first event fails and comes back at once. While the event after
	// it is still in flight, only the failed one can be claimed again.
	if n, err := s.Settle(ctx, all.Lease, storage.Outcome{Failed: []storage.Failure{{ID: b[0], Error: "x"}}}); err != nil || n.Failed != 1 {
		t.Fatalf("Settle = %d, %v", n.Failed, err)
	}
	again := claimOrdered(t, s, storage.DeadSkip, "", 100)
	if got := eventIDs(again.Events); !slices.Equal(got, b[:1]) {
		t.Fatalf("with B's second event still in flight the claim took %v, want only B's first %v", got, b[0])
	}
	// Both are handed back, as a relay does with the rest of a key's run
	// after a failure: B resumes from its first event, in order.
	for _, l := range []struct {
		lease storage.Lease
		id    uuid.UUID
	}{{again.Lease, b[0]}, {all.Lease, b[1]}} {
		if n, err := s.Settle(ctx, l.lease, storage.Outcome{Released: []uuid.UUID{l.id}}); err != nil || n.Released != 1 {
			t.Fatalf("Settle = %d, %v", n.Released, err)
		}
	}
	want := append(slices.Clone(b), second[1])
	if got := eventIDs(claimOrdered(t, s, storage.DeadSkip, "", 100).Events); !slices.Equal(got, want) {
		t.Fatalf("after B was handed back the claim took %v, want B's events in order %v", got, want)
	}
}

func testOrderedClaimWaitsOutABackoff(t *testing.T, h Harness) {
	tb := h.New(t)
	s := tb.Storage()
	k := insert(t, tb, event{PartitionKey: "k"}, event{PartitionKey: "k"}, event{PartitionKey: "k"}, event{PartitionKey: "other"})
	b := claimOrdered(t, s, storage.DeadBlock, "", 100)
	if len(b.Events) != 4 {
		t.Fatalf("claimed %d events, want 4", len(b.Events))
	}
	// The first event backs off for an hour; the rest are handed back.
	if n, err := s.Settle(ctx, b.Lease, storage.Outcome{Failed: []storage.Failure{{ID: k[0], Error: "x", Delay: time.Hour}}}); err != nil || n.Failed != 1 {
		t.Fatalf("Settle = %d, %v", n.Failed, err)
	}
	if n, err := s.Settle(ctx, b.Lease, storage.Outcome{Released: k[1:]}); err != nil || n.Released != 3 {
		t.Fatalf("Settle = %d, %v", n.Released, err)
	}
	for _, p := range []storage.DeadPolicy{storage.DeadSkip, storage.DeadBlock} {
		got := claimOrdered(t, s, p, "", 100)
		if ids := eventIDs(got.Events); !slices.Equal(ids, k[3:]) {
			t.Fatalf("(%s) while k's first event backs off the claim took %v, want only the other key's %v", p, ids, k[3])
		}
		deliver(t, s, got)
		k = k[:3]
	}
	tb.Set(t, Change{AvailableAt: Ago(0)}, k[0])
	if got := eventIDs(claimOrdered(t, s, storage.DeadSkip, "", 100).Events); !slices.Equal(got, k) {
		t.Fatalf("once due the claim took %v, want k's events in order %v", got, k)
	}
}

func testOrderedClaimRespectsTheLimit(t *testing.T, h Harness) {
	tb := h.New(t)
	s := tb.Storage()
	var events []event
	for i := range 30 {
		events = append(events, event{PartitionKey: fmt.Sprintf("key-%d", i%4)})
		if i%5 == 0 {
			events = append(events, event{})
		}
	}
	ids := insert(t, tb, events...)
	var claimed []uuid.UUID
	for len(claimed) < len(ids) {
		b := claimOrdered(t, s, storage.DeadSkip, "", 5)
		if len(b.Events) == 0 || len(b.Events) > 5 {
			t.Fatalf("ordered claim with Limit 5 took %d events (%d of %d claimed so far)", len(b.Events), len(claimed), len(ids))
		}
		claimed = append(claimed, eventIDs(b.Events)...)
		deliver(t, s, b)
	}
	if !sameSet(claimed, ids) {
		t.Fatalf("claimed %d events, want each of the %d once", len(claimed), len(ids))
	}
}

// testOrderedClaimComparesKeysBytewise: keys are equal only when their
// bytes are (no case folding, accents or trailing-space padding), and the
// cursor walks them in Go's string order.
func testOrderedClaimComparesKeysBytewise(t *testing.T, h Harness) {
	tb := h.New(t)
	s := tb.Storage()
	keys := []string{"é", "a", "k ", "B", "z", "k", "b", "A", "e"}
	sorted := slices.Sorted(slices.Values(keys)) // A B a b e k "k " z é
	var events []event
	for range 2 {
		for _, k := range keys {
			events = append(events, event{PartitionKey: k})
		}
	}
	ids := insert(t, tb, events...)
	firstOf, secondOf := map[string]uuid.UUID{}, map[string]uuid.UUID{}
	for i, k := range keys {
		firstOf[k], secondOf[k] = ids[i], ids[len(keys)+i]
	}

	// One event per claim, each delivered at once so that its key is free
	// again: only the cursor decides which key comes next.
	cursor := ""
	for round, want := range [][]uuid.UUID{mapKeys(firstOf, sorted), mapKeys(secondOf, sorted)} {
		for i, id := range want {
			b := claimOrdered(t, s, storage.DeadSkip, cursor, 1)
			if len(b.Events) != 1 || b.Events[0].ID != id {
				t.Fatalf("round %d, claim after key %q took %v, want key %q's event %s (keys in byte order: %q)",
					round+1, cursor, eventIDs(b.Events), sorted[i], id, sorted)
			}
			if got := b.Events[0].PartitionKey; got != sorted[i] {
				t.Fatalf("claimed event's key = %q, want %q", got, sorted[i])
			}
			if b.After != sorted[i] {
				t.Fatalf("Batch.After = %q after a claim of key %q, want that key", b.After, sorted[i])
			}
			cursor = b.After
			deliver(t, s, b)
		}
	}
	if b := claimOrdered(t, s, storage.DeadSkip, cursor, 1); len(b.Events) != 0 {
		t.Fatalf("claimed %v after every event was delivered", eventIDs(b.Events))
	}

	// A key in flight holds only itself: not the same letter in another
	// case, with an accent, or with a trailing space.
	inFlight := insert(t, tb, event{PartitionKey: "k"}, event{PartitionKey: "e"})
	if got := eventIDs(claimOrdered(t, s, storage.DeadSkip, "", 100).Events); !slices.Equal(got, inFlight) {
		t.Fatalf("claimed %v, want %v", got, inFlight)
	}
	waiting := insert(t, tb, event{PartitionKey: "k"}, event{PartitionKey: "e"})
	others := insert(t, tb, event{PartitionKey: "k "}, event{PartitionKey: "K"}, event{PartitionKey: "é"},
		event{PartitionKey: "e\u0301"}, event{PartitionKey: " k"})
	if got := eventIDs(claimOrdered(t, s, storage.DeadSkip, "", 100).Events); !slices.Equal(got, others) {
		t.Fatalf("with keys \"k\" and \"e\" in flight the claim took %v, want every other key's event %v (and not %v)", got, others, waiting)
	}
}

// testOrderedClaimReturnsWhereTheWalkEnded: Batch.After is the last key the
// claim's walk took — past ClaimParams.After, then wrapped around — or
// ClaimParams.After itself when the claim took no key.
func testOrderedClaimReturnsWhereTheWalkEnded(t *testing.T, h Harness) {
	tb := h.New(t)
	s := tb.Storage()
	insert(t, tb, event{PartitionKey: "c"}, event{PartitionKey: "a"}, event{PartitionKey: "e"},
		event{PartitionKey: "b"}, event{PartitionKey: "d"})
	after := ""
	for _, want := range []struct {
		keys  []string
		after string
	}{
		{[]string{"a", "b"}, "b"},
		{[]string{"c", "d"}, "d"},
		{[]string{"e"}, "e"},
	} {
		b := claimOrdered(t, s, storage.DeadSkip, after, 2)
		if got := eventKeys(b.Events); !slices.Equal(sorted(got), want.keys) || b.After != want.after {
			t.Fatalf("claim after %q took keys %q and returned After %q, want keys %q and After %q",
				after, got, b.After, want.keys, want.after)
		}
		deliver(t, s, b)
		after = b.After
	}

	// Keys past the cursor first, then from the start: the walk wrapped,
	// and it ended at the last key it took after wrapping.
	insert(t, tb, event{PartitionKey: "b"}, event{PartitionKey: "f"}, event{PartitionKey: "a"})
	b := claimOrdered(t, s, storage.DeadSkip, "c", 10)
	if got := eventKeys(b.Events); !slices.Equal(sorted(got), []string{"a", "b", "f"}) || b.After != "b" {
		t.Fatalf("claim after \"c\" took keys %q and returned After %q, want a, b and f and After \"b\"", got, b.After)
	}
	deliver(t, s, b)

	// Nothing keyed: the walk did not move.
	insert(t, tb, event{})
	b = claimOrdered(t, s, storage.DeadSkip, "m", 10)
	if len(b.Events) != 1 || b.After != "m" {
		t.Fatalf("claim of one unkeyed event took %d events and returned After %q, want 1 and \"m\"", len(b.Events), b.After)
	}
	deliver(t, s, b)
	if b := claimOrdered(t, s, storage.DeadSkip, "m", 10); len(b.Events) != 0 || b.After != "m" {
		t.Fatalf("empty claim took %d events and returned After %q, want none and \"m\"", len(b.Events), b.After)
	}
}

// testOrderedClaimCapsRunsAtRunLimit: a key gives a claim at most
// RunLimit events, RunLimitDefault when it is zero.
func testOrderedClaimCapsRunsAtRunLimit(t *testing.T, h Harness) {
	tb := h.New(t)
	s := tb.Storage()
	events := make([]event, storage.RunLimitDefault+5)
	for i := range events {
		events[i] = event{PartitionKey: "k"}
	}
	ids := insert(t, tb, events...)
	for _, c := range []struct{ runLimit, want int }{{3, 3}, {0, storage.RunLimitDefault}} {
		b, err := s.Claim(ctx, storage.ClaimParams{RelayID: "relay-1", Limit: 100,
			Ordering: storage.OrderingPartition, OnDead: storage.DeadSkip, RunLimit: c.runLimit})
		if err != nil {
			t.Fatal(err)
		}
		if got := eventIDs(b.Events); !slices.Equal(got, ids[:c.want]) {
			t.Fatalf("RunLimit %d: claimed %d events of the key, want its first %d", c.runLimit, len(got), c.want)
		}
		deliver(t, s, b)
		ids = ids[c.want:]
	}
}

func eventKeys(events []outbox.Event) []string {
	keys := make([]string, len(events))
	for i, e := range events {
		keys[i] = e.PartitionKey
	}
	return keys
}

func sorted(s []string) []string { return slices.Sorted(slices.Values(s)) }

func mapKeys(m map[string]uuid.UUID, keys []string) []uuid.UUID {
	out := make([]uuid.UUID, len(keys))
	for i, k := range keys {
		out[i] = m[k]
	}
	return out
}

// testOrderedClaimOnDead: under ORDERING_ON_DEAD=skip a DEAD event lets
// the events after it go on; under block it holds them — whether it heads
// the key or sits within its run — until an operator retries it.
func testOrderedClaimOnDead(t *testing.T, h Harness) {
	tb := h.New(t)
	s := tb.Storage()
	head := insert(t, tb, event{Type: "head", PartitionKey: "head"}, event{PartitionKey: "head"}, event{PartitionKey: "head"})
	within := insert(t, tb, event{PartitionKey: "within"}, event{PartitionKey: "within"}, event{PartitionKey: "within"})
	free := insert(t, tb, event{PartitionKey: "free"})
	// head's first event dies as the relay would bury it, and the relay
	// hands back the rest.
	b := claimOrdered(t, s, storage.DeadBlock, "", 100)
	if got, want := eventIDs(b.Events), slices.Concat(head, within, free); !slices.Equal(got, want) {
		t.Fatalf("claimed %v, want %v", got, want)
	}
	if n, err := s.Settle(ctx, b.Lease, storage.Outcome{Failed: []storage.Failure{{ID: head[0], Error: "poison", Dead: true}}}); err != nil || n.Failed != 1 {
		t.Fatalf("Settle = %d, %v", n.Failed, err)
	}
	if n, err := s.Settle(ctx, b.Lease, storage.Outcome{Released: eventIDs(b.Events)[1:]}); err != nil || n.Released != len(b.Events)-1 {
		t.Fatalf("Settle = %d, %v", n.Released, err)
	}
	// within's second event is DEAD behind a PENDING one (it died under
	// skip, and its predecessor was retried since).
	tb.Set(t, Change{Status: outbox.StatusDead, LastError: Ptr("poison")}, within[1])
	// A DEAD event with nothing behind it holds nothing back.
	deadOnly := insert(t, tb, event{PartitionKey: "dead-only"})
	tb.Set(t, Change{Status: outbox.StatusDead}, deadOnly...)

	cases := []struct {
		policy storage.DeadPolicy
		want   []uuid.UUID
	}{
		{storage.DeadSkip, []uuid.UUID{head[1], head[2], within[0], within[2], free[0]}},
		{storage.DeadBlock, []uuid.UUID{within[0], free[0]}},
	}
	for _, c := range cases {
		got := claimOrdered(t, s, c.policy, "", 100)
		if ids := eventIDs(got.Events); !sameSet(ids, c.want) {
			t.Errorf("ORDERING_ON_DEAD=%s claimed %v, want %v", c.policy, ids, c.want)
		}
		if n, err := s.Settle(ctx, got.Lease, storage.Outcome{Released: eventIDs(got.Events)}); err != nil || n.Released != len(got.Events) {
			t.Fatalf("Settle = %d, %v", n.Released, err)
		}
	}

	st, err := s.Stats(ctx, storage.StatsParams{})
	if err != nil {
		t.Fatal(err)
	}
	wantBlocked := []storage.BlockedKey{{Key: "head", DeadEventID: head[0], DeadEventType: "head", Waiting: 2}}
	if fmt.Sprint(st.BlockedKeys) != fmt.Sprint(wantBlocked) {
		t.Errorf("Stats.BlockedKeys = %+v, want %+v", st.BlockedKeys, wantBlocked)
	}

	// An operator retries the DEAD head: block mode takes the key's whole
	// run, in order.
	if n, err := s.RetryDead(ctx, storage.RetryDeadParams{DeadFilter: storage.DeadFilter{IDs: head[:1]}}); err != nil || n != 1 {
		t.Fatalf("RetryDead = %d, %v", n, err)
	}
	got := claimOrdered(t, s, storage.DeadBlock, "", 100)
	var heads []uuid.UUID
	for _, e := range got.Events {
		if e.PartitionKey == "head" {
			heads = append(heads, e.ID)
		}
	}
	if !slices.Equal(heads, head) {
		t.Errorf("after retry-dead the block-mode claim took %v of key head, want %v in order", heads, head)
	}
}

// testOrderedClaimsKeepKeysInOrderUnderConcurrency: four claimers on two
// stores claim, fail, hand back and crash (their leases reaped) at random,
// and every key's events are still claimed strictly in order, each after
// the one before it was finished.
func testOrderedClaimsKeepKeysInOrderUnderConcurrency(t *testing.T, h Harness) {
	tb := h.New(t)
	stores := []storage.Storage{tb.Storage(), openSecond(t, tb)}
	keys := []string{"a", "B", "b", "é", "k", "k ", "orders-1", "orders-2"}
	const perKey, unkeyed, batches = 20, 20, 4

	// The events go in over a few statements, the keys interleaved.
	index := map[uuid.UUID]int{} // an event's place in its key
	total := 0
	for stmt := range batches {
		var (
			events []event
			places []int
		)
		for i := stmt * perKey / batches; i < (stmt+1)*perKey/batches; i++ {
			for _, k := range keys {
				events = append(events, event{PartitionKey: k})
				places = append(places, i)
			}
			if i < unkeyed {
				events = append(events, event{})
				places = append(places, -1)
			}
		}
		for j, id := range insert(t, tb, events...) {
			index[id] = places[j]
		}
		total += len(events)
	}

	var (
		mu        sync.Mutex
		next      = map[string]int{} // the place each key's next claim must start at
		delivered = map[uuid.UUID]bool{}
		changed   = make(chan struct{}) // closed and replaced after every settle
		failure   error
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if failure == nil {
			failure = err
		}
	}
	settled := func() {
		mu.Lock()
		close(changed)
		changed = make(chan struct{})
		mu.Unlock()
	}
	runCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	claimer := func(r int) error {
		s := stores[r%len(stores)]
		rng := rand.New(rand.NewPCG(uint64(r), 7))
		policy := []storage.DeadPolicy{storage.DeadSkip, storage.DeadBlock}[r%2]
		relayID := fmt.Sprintf("relay-%d", r)
		cursor := ""
		for {
			mu.Lock()
			done, wake := len(delivered) == total || failure != nil, changed
			mu.Unlock()
			if done {
				return nil
			}
			b, err := s.Claim(runCtx, storage.ClaimParams{RelayID: relayID, Limit: 7,
				Ordering: storage.OrderingPartition, OnDead: policy, After: cursor})
			if err != nil {
				return fmt.Errorf("%s: claim: %w", relayID, err)
			}
			if len(b.Events) == 0 {
				select { // wait for a settle to free a key
				case <-wake:
					continue
				case <-runCtx.Done():
					return fmt.Errorf("%s: gave up with %d of %d delivered", relayID, len(delivered), total)
				}
			}

			// Check the batch, and decide its fate, before any settle makes
			// the keys' next events claimable.
			var ok, failed, released []uuid.UUID
			crashed, failedKey := map[string]bool{}, map[string]bool{}
			expect := map[string]int{}
			cursor = b.After
			mu.Lock()
			for _, e := range b.Events {
				k := e.PartitionKey
				if k == "" {
					ok = append(ok, e.ID)
					continue
				}
				want, seen := expect[k]
				if !seen {
					want = next[k]
				}
				if got := index[e.ID]; got != want {
					mu.Unlock()
					return fmt.Errorf("%s claimed event %d of key %q, want event %d: out of order", relayID, got, k, want)
				}
				expect[k] = want + 1
				switch {
				case failedKey[k]:
					released = append(released, e.ID) // handed back after the failure
				case crashed[k]:
				case rng.IntN(20) == 0:
					crashed[k] = true // left DELIVERING for the reaper
				case rng.IntN(8) == 0:
					failedKey[k] = true
					failed = append(failed, e.ID)
				default:
					ok = append(ok, e.ID)
					next[k]++
				}
			}
			for _, id := range ok {
				if delivered[id] {
					mu.Unlock()
					return fmt.Errorf("%s claimed delivered event %s", relayID, id)
				}
				delivered[id] = true
			}
			mu.Unlock()

			if len(ok) > 0 {
				if n, err := s.Settle(runCtx, b.Lease, storage.Outcome{Delivered: ok}); err != nil || n.Delivered != len(ok) {
					return fmt.Errorf("%s: Settle = %d, %v", relayID, n.Delivered, err)
				}
			}
			if len(failed) > 0 {
				fs := make([]storage.Failure, len(failed))
				for i, id := range failed {
					fs[i] = storage.Failure{ID: id, Error: "broker said no"}
				}
				if n, err := s.Settle(runCtx, b.Lease, storage.Outcome{Failed: fs}); err != nil || n.Failed != len(fs) {
					return fmt.Errorf("%s: Settle = %d, %v", relayID, n.Failed, err)
				}
			}
			if len(released) > 0 {
				if n, err := s.Settle(runCtx, b.Lease, storage.Outcome{Released: released}); err != nil || n.Released != len(released) {
					return fmt.Errorf("%s: Settle = %d, %v", relayID, n.Released, err)
				}
			}
			if len(crashed) > 0 {
				var lost []uuid.UUID
				for _, e := range b.Events {
					if crashed[e.PartitionKey] {
						lost = append(lost, e.ID)
					}
				}
				tb.Set(t, Change{LockedAt: Ago(time.Hour)}, lost...)
				// Another claimer's Reap may take them back first.
				if _, err := s.Reap(runCtx, storage.ReapParams{LeaseTimeout: time.Minute, Limit: 100, MaxAttempts: 1000}); err != nil {
					return fmt.Errorf("%s: Reap: %w", relayID, err)
				}
			}
			settled()
		}
	}
	var wg sync.WaitGroup
	for r := range 4 {
		wg.Go(func() {
			if err := claimer(r); err != nil {
				fail(err)
			}
		})
	}
	wg.Wait()
	if failure != nil {
		t.Fatal(failure)
	}
	if len(delivered) != total {
		t.Fatalf("%d of %d events delivered", len(delivered), total)
	}
	for _, k := range keys {
		if next[k] != perKey {
			t.Errorf("key %q: %d of %d events delivered in order", k, next[k], perKey)
		}
	}
	if c := counts(t, tb); c[outbox.StatusDelivered] != total {
		t.Errorf("the table holds %v, want all %d DELIVERED", c, total)
	}
}
