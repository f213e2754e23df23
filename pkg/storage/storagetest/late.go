package storagetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
)

// Claims go forward from where the relay's last claim ended, so that they
// do not step over the dead row versions behind it. These tests check that
// nothing is left behind that position for good: rows of transactions that
// commit late, rows handed back, retried, reaped or scheduled.

// uncommitted inserts events in a transaction that stays open until the
// returned commit is called.
func uncommitted(t testing.TB, tb Table, events ...event) ([]uuid.UUID, func()) {
	t.Helper()
	c := columns(t, events)
	return c.IDs, tb.InsertUncommitted(t, c)
}

// claimUntil claims with p, as a relay polls, until the event id is among
// the claimed ones or the deadline passes; every event claimed on the way
// is marked delivered. It returns how long that took.
func claimUntil(t *testing.T, s storage.Queue, p storage.ClaimParams, id uuid.UUID, deadline time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	eventually.True(t, deadline, func() bool {
		b, err := s.Claim(ctx, p)
		if err != nil {
			t.Fatalf("Claim: %v", err)
		}
		if len(b.Events) > 0 {
			if _, err := s.Settle(ctx, b.Lease, storage.Outcome{Delivered: eventIDs(b.Events)}); err != nil {
				t.Fatalf("Settle: %v", err)
			}
		}
		return slices.Contains(eventIDs(b.Events), id)
	}, func() string { return fmt.Sprintf("event %s claimed", id) })
	return time.Since(start)
}

// drainAll claims with p until a claim comes back empty, marking every event
// delivered, and returns the ids in claim order.
func drainAll(t *testing.T, s storage.Queue, p storage.ClaimParams) []uuid.UUID {
	t.Helper()
	var ids []uuid.UUID
	for {
		b, err := s.Claim(ctx, p)
		if err != nil {
			t.Fatalf("Claim: %v", err)
		}
		if len(b.Events) == 0 {
			return ids
		}
		ids = append(ids, eventIDs(b.Events)...)
		if _, err := s.Settle(ctx, b.Lease, storage.Outcome{Delivered: eventIDs(b.Events)}); err != nil {
			t.Fatalf("Settle: %v", err)
		}
	}
}

// testClaimFindsALateCommit: a producer's transaction takes its place in
// the insertion order, others commit after it and are claimed, then it
// commits. Its event must still be claimed, soon.
func testClaimFindsALateCommit(t *testing.T, h Harness) {
	tb := h.New(t)
	late, commit := uncommitted(t, tb, event{Type: "late"})
	after := insert(t, tb, event{}, event{}, event{})
	p := storage.ClaimParams{RelayID: "relay-1", Limit: 10, SweepInterval: time.Hour}
	if got := drainAll(t, tb.Storage(), p); !sameSet(got, after) {
		t.Fatalf("claimed %v, want the three committed events %v", got, after)
	}
	commit()
	// A transaction that was open at the relay's last claim is looked for
	// again as soon as it ends: no sweep needed (the interval is an hour).
	claimUntil(t, tb.Storage(), p, late[0], 10*time.Second)
}

// testClaimFindsALateCommitBehindManyClaims: a transaction stays open
// while many claims move the position far past it; once it commits, the
// sweep finds its event within the sweep interval.
func testClaimFindsALateCommitBehindManyClaims(t *testing.T, h Harness) {
	tb := h.New(t)
	late, commit := uncommitted(t, tb, event{Type: "late"})
	events := make([]event, 300)
	after := insert(t, tb, events...)
	const sweep = 300 * time.Millisecond
	p := storage.ClaimParams{RelayID: "relay-1", Limit: 2, SweepInterval: sweep}
	if got := drainAll(t, tb.Storage(), p); !sameSet(got, after) {
		t.Fatalf("claimed %d events, want the %d committed ones", len(got), len(after))
	}
	commit()
	took := claimUntil(t, tb.Storage(), p, late[0], 20*time.Second)
	t.Logf("the late event was claimed %s after its commit (sweep interval %s)", took, sweep)
}

// testClaimFindsRowsHandedBackAtOnce: rows released, failed with no delay,
// reaped or retried from DEAD were written before rows the claims have
// taken since; each hand-back places its row ahead of where the claims
// have reached (MySQL's cursor: updated_at now, so its state_at is now or
// later; PostgreSQL's frontier: the handing transaction as its writer),
// and the next claim takes it, not a sweep.
func testClaimFindsRowsHandedBackAtOnce(t *testing.T, h Harness) {
	claimFindsRowsHandedBack(t, h, 0)
}

// testClaimFindsRowsHandedBackWhateverTheirCreatedAt: the same for rows
// whose created_at lies ahead of the database's clock (a producer that
// sets it from a clock running fast). Both drivers' claims find such a
// row once its created_at has passed (a hand-back makes it due again,
// available_at after created_at, for claims beside a log reader, which
// leave fresh rows to the log): not by a sweep, which claims beside
// CAPTURE=wal's stream never make.
func testClaimFindsRowsHandedBackWhateverTheirCreatedAt(t *testing.T, h Harness) {
	claimFindsRowsHandedBack(t, h, 2*time.Second)
}

// claimFindsRowsHandedBack runs both, the rows created lead ahead of the
// database's clock.
func claimFindsRowsHandedBack(t *testing.T, h Harness, lead time.Duration) {
	tb := h.New(t)
	s := tb.Storage()
	ids := insert(t, tb, make([]event, 40)...)
	if lead > 0 {
		tb.Set(t, Change{CreatedAt: Ago(-lead)}, ids...)
	}
	p := storage.ClaimParams{RelayID: "relay-1", Limit: 2, SweepInterval: time.Hour}
	var batches []storage.Batch
	for range 4 {
		b, err := s.Claim(ctx, p)
		if err != nil || len(b.Events) != 2 {
			t.Fatalf("Claim = %d events, %v; want 2", len(b.Events), err)
		}
		batches = append(batches, b)
	}
	// The other 32 go out, so that the position is far past the first 8
	// whatever other transactions run meanwhile.
	if got := drainAll(t, s, p); !sameSet(got, ids[8:]) {
		t.Fatalf("claimed %d events, want the other %d", len(got), len(ids[8:]))
	}
	// batch 0 released, batch 1 failed with no delay, batch 2 reaped,
	// batch 3 delivered but for one that went DEAD and is retried.
	if _, err := s.Settle(ctx, batches[0].Lease, storage.Outcome{Released: eventIDs(batches[0].Events)}); err != nil {
		t.Fatal(err)
	}
	var failures []storage.Failure
	for _, e := range batches[1].Events {
		failures = append(failures, storage.Failure{ID: e.ID, Error: "retry", Delay: 0})
	}
	if _, err := s.Settle(ctx, batches[1].Lease, storage.Outcome{Failed: failures}); err != nil {
		t.Fatal(err)
	}
	tb.Set(t, Change{LockedAt: Ago(time.Hour)}, eventIDs(batches[2].Events)...)
	if _, err := s.Reap(ctx, storage.ReapParams{LeaseTimeout: time.Minute, Limit: 10, MaxAttempts: 10}); err != nil {
		t.Fatal(err)
	}
	dead := batches[3].Events[0].ID
	if _, err := s.Settle(ctx, batches[3].Lease, storage.Outcome{Failed: []storage.Failure{
		{ID: dead, Error: "bad", Dead: true},
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RetryDead(ctx, storage.RetryDeadParams{DeadFilter: storage.DeadFilter{IDs: []uuid.UUID{dead}}}); err != nil {
		t.Fatal(err)
	}
	want := append(slices.Clone(ids[:6]), dead)
	var got []uuid.UUID
	take := func() bool {
		b, err := s.Claim(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, eventIDs(b.Events)...)
		return len(got) >= len(want)
	}
	if lead == 0 {
		for range 4 { // 7 rows, 2 a claim
			take()
		}
	} else {
		// As beside CAPTURE=wal's stream, where claims take no fresh
		// rows and never sweep: a row handed back is found as due again
		// or never.
		p.Fresh = storage.FreshEvents{ToLog: true}
		eventually.True(t, lead+10*time.Second, take, func() string {
			return fmt.Sprintf("%d of the %d rows handed back claimed", len(got), len(want))
		})
	}
	if !sameSet(got, want) {
		t.Fatalf("the next claims took %v, want every row handed back %v", got, want)
	}
}

// testClaimFindsRowsThatComeDue: a scheduled event and a retry with a
// back-off are claimed once due, though many claims went past them.
func testClaimFindsRowsThatComeDue(t *testing.T, h Harness) {
	tb := h.New(t)
	s := tb.Storage()
	scheduled := insert(t, tb, event{AvailableIn: 1500 * time.Millisecond})
	ids := insert(t, tb, make([]event, 6)...)
	p := storage.ClaimParams{RelayID: "relay-1", Limit: 1, SweepInterval: time.Hour}
	b, err := s.Claim(ctx, p)
	if err != nil || len(b.Events) != 1 || b.Events[0].ID != ids[0] {
		t.Fatalf("Claim = %v, %v; want %s", b.Events, err, ids[0])
	}
	if _, err := s.Settle(ctx, b.Lease, storage.Outcome{Failed: []storage.Failure{
		{ID: ids[0], Error: "later", Delay: time.Second},
	}}); err != nil {
		t.Fatal(err)
	}
	if got := drainAll(t, s, p); !sameSet(got, ids[1:]) {
		t.Fatalf("claimed %v, want %v", got, ids[1:])
	}
	claimUntil(t, s, p, ids[0], 10*time.Second)
	claimUntil(t, s, p, scheduled[0], 10*time.Second)
	if c := counts(t, tb); c[outbox.StatusPending] != 0 {
		t.Errorf("rows left PENDING: %v", c)
	}
}
