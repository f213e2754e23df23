package storagetest

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
)

// Held claims (storage.HeldQueue) are optional: each test is skipped for a
// driver that does not offer them.

// heldQueue returns tb's storage as a HeldQueue, or skips t.
func heldQueue(t *testing.T, tb Table) storage.HeldQueue {
	t.Helper()
	h, ok := tb.Storage().(storage.HeldQueue)
	if !ok {
		t.Skip("the driver does not hold claims (storage.HeldQueue)")
	}
	return h
}

// claimHeld makes a held claim with an idle time of a minute.
func claimHeld(t *testing.T, h storage.HeldQueue, p storage.ClaimParams) storage.HeldBatch {
	t.Helper()
	return claimHeldIdle(t, h, p, time.Minute)
}

func claimHeldIdle(t *testing.T, h storage.HeldQueue, p storage.ClaimParams, idle time.Duration) storage.HeldBatch {
	t.Helper()
	b, err := h.ClaimHeld(ctx, p, idle)
	if err != nil {
		t.Fatalf("ClaimHeld: %v", err)
	}
	if b.Tx != nil {
		t.Cleanup(b.Tx.Abort)
	}
	return b
}

func testHeldClaimLeavesRowsPendingUnderItsLocks(t *testing.T, h Harness) {
	tb := h.New(t)
	held := heldQueue(t, tb)
	ids := insertN(t, tb, 5, "e")
	before := snapshot(t, tb)

	b := claimHeld(t, held, storage.ClaimParams{RelayID: "relay-1", Limit: 3})
	if got := eventIDs(b.Events); !slices.Equal(got, ids[:3]) {
		t.Fatalf("held claim took %v, want the first three %v", got, ids[:3])
	}
	requireUnchanged(t, "a held claim", before, snapshot(t, tb))

	// Another relay, leasing or holding, skips the locked rows.
	other := openSecond(t, tb)
	if got := eventIDs(claim(t, other, "relay-2", 10).Events); !slices.Equal(got, ids[3:]) {
		t.Fatalf("another relay claimed %v, want only the rows not held %v", got, ids[3:])
	}
	if b2 := claimHeld(t, held, storage.ClaimParams{RelayID: "relay-3", Limit: 10}); len(b2.Events) != 0 || b2.Tx != nil {
		t.Fatalf("a second held claim took %v, want nothing and no transaction", eventIDs(b2.Events))
	}

	if err := b.Tx.Settle(ctx, storage.Outcome{Delivered: ids[:3]}); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids[:3] {
		row := rowOf(t, tb, id)
		if row.Status != outbox.StatusDelivered || row.DeliveredAt == nil || row.LockedBy != nil {
			t.Fatalf("settled row %s", describe(row))
		}
		// Settled after the claim, by the database's clock.
		if row.DeliveredAt.Before(b.Lease.LockedAt) {
			t.Errorf("delivered_at %s is before the claim at %s", row.DeliveredAt, b.Lease.LockedAt)
		}
	}
}

func testHeldSettleRecordsEveryOutcome(t *testing.T, h Harness) {
	for _, del := range []bool{false, true} {
		name := "mark"
		if del {
			name = "delete"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tb := h.New(t)
			held := heldQueue(t, tb)
			ids := insertN(t, tb, 4, "e")
			b := claimHeld(t, held, storage.ClaimParams{RelayID: "relay-1", Limit: 10})
			if len(b.Events) != 4 {
				t.Fatalf("held claim took %d events, want 4", len(b.Events))
			}
			if err := b.Tx.Settle(ctx, everyKind(ids, del)); err != nil {
				t.Fatal(err)
			}
			rows := byID(t, tb)
			switch row, ok := rows[ids[0]]; {
			case del && ok:
				t.Errorf("delivered row left in delete mode: %s", describe(row))
			case !del && row.Status != outbox.StatusDelivered:
				t.Errorf("delivered row %s", describe(row))
			}
			if row := rows[ids[1]]; row.Status != outbox.StatusPending || row.Attempts != 1 ||
				str(row.LastError) != "broker said later" || !within(row.AvailableAt, tb.Now(t).Add(time.Hour), time.Minute) {
				t.Errorf("retried row %s, want PENDING, attempts 1, its error, due in an hour", describe(row))
			}
			if row := rows[ids[2]]; row.Status != outbox.StatusDead || row.Attempts != 1 || str(row.LastError) != "broker said never" {
				t.Errorf("dead row %s", describe(row))
			}
			if row := rows[ids[3]]; row.Status != outbox.StatusPending || row.Attempts != 0 || row.LastError != nil {
				t.Errorf("released row %s, want PENDING as it was", describe(row))
			}
			// The released row is due at once, wherever the relay's claims
			// stand; the retried one is not.
			if got := eventIDs(claimHeld(t, held, storage.ClaimParams{RelayID: "relay-1", Limit: 10}).Events); !slices.Equal(got, ids[3:]) {
				t.Errorf("the next held claim took %v, want the released row %v", got, ids[3:])
			}
		})
	}
}

func testHeldClaimStopsAtMaxBytes(t *testing.T, h Harness) {
	tb := h.New(t)
	held := heldQueue(t, tb)
	big := func(n int) event { return event{Payload: []byte(strings.Repeat("p", n))} }
	ids := insert(t, tb, big(400_000), big(400_000), big(100_000), big(400_000), big(10))
	p := storage.ClaimParams{RelayID: "r", Limit: 100, MaxBytes: 1_000_000}
	before := map[uuid.UUID]storage.Row{}
	for _, id := range ids[3:] {
		before[id] = rowOf(t, tb, id)
	}
	b := claimHeld(t, held, p)
	if !slices.Equal(eventIDs(b.Events), ids[:3]) {
		t.Fatalf("held claim took %d events, want the first 3 (900 KB of 1 MB)", len(b.Events))
	}
	if !b.Full {
		t.Errorf("a held batch its byte limit cut with events left says Full false: the relay would wait for its next poll")
	}
	if err := b.Tx.Settle(ctx, storage.Outcome{Delivered: ids[:3]}); err != nil {
		t.Fatal(err)
	}
	// The rows it locked past the limit are PENDING as they were (locking
	// them wrote nothing of theirs); the relay's next claims take them,
	// the larger one alone.
	for _, id := range ids[3:] {
		if row, was := rowOf(t, tb, id), before[id]; row.Status != outbox.StatusPending || !row.AvailableAt.Equal(was.AvailableAt) || !row.UpdatedAt.Equal(was.UpdatedAt) {
			t.Errorf("row locked past the limit: %s, available_at %s, updated_at %s; want PENDING as it was written (%s, %s)",
				row.Status, row.AvailableAt, row.UpdatedAt, was.AvailableAt, was.UpdatedAt)
		}
	}
	p.MaxBytes = 100_000
	for _, want := range ids[3:] {
		b := claimHeld(t, held, p)
		if got := eventIDs(b.Events); !slices.Equal(got, []uuid.UUID{want}) {
			t.Fatalf("held claim took %v, want %v alone", got, want)
		}
		if err := b.Tx.Settle(ctx, storage.Outcome{Delivered: []uuid.UUID{want}}); err != nil {
			t.Fatal(err)
		}
	}
	if c := counts(t, tb); c[outbox.StatusDelivered] != len(ids) {
		t.Fatalf("counts %v, want all %d delivered", c, len(ids))
	}
}

func testHeldAbortLeavesRowsAsTheyWere(t *testing.T, h Harness) {
	tb := h.New(t)
	held := heldQueue(t, tb)
	ids := insertN(t, tb, 3, "e")
	before := snapshot(t, tb)
	p := storage.ClaimParams{RelayID: "relay-1", Limit: 10, SweepInterval: 100 * time.Millisecond}
	b := claimHeld(t, held, p)
	b.Tx.Abort()
	requireUnchanged(t, "an aborted held claim", before, snapshot(t, tb))
	if err := b.Tx.Settle(ctx, storage.Outcome{Delivered: ids}); err == nil {
		t.Error("Settle after Abort succeeded, want an error: the transaction has ended")
	}
	// The relay's claims had passed them; the driver takes back what the
	// aborted claim had locked (PostgreSQL's frontier watches their
	// writers again from the lowest of them), so a later claim takes them.
	claimUntil(t, tb.Storage(), p, ids[0], 10*time.Second)
}

func testHeldTransactionEndsWhenLeftIdle(t *testing.T, h Harness) {
	tb := h.New(t)
	held := heldQueue(t, tb)
	ids := insertN(t, tb, 1, "e")
	other := openSecond(t, tb)

	// Left idle: the database ends the transaction, and another claim
	// takes the rows.
	left := claimHeldIdle(t, held, storage.ClaimParams{RelayID: "relay-1", Limit: 1}, 300*time.Millisecond)
	if got := eventIDs(left.Events); !slices.Equal(got, ids) {
		t.Fatalf("held claim took %v, want %v", got, ids)
	}
	eventually.True(t, 10*time.Second, func() bool { return len(claim(t, other, "relay-2", 10).Events) > 0 },
		func() string { return "the idle transaction's row claimed by another relay" })
	if err := left.Tx.Settle(ctx, storage.Outcome{Delivered: ids}); err == nil {
		t.Fatal("Settle of a transaction the database ended succeeded")
	}
	// Recording anew changes nothing another claim owns.
	if n, err := held.SettleHeld(ctx, left.Lease, storage.Outcome{Delivered: ids}); err != nil || n.Len() != 0 {
		t.Fatalf("SettleHeld = %+v, %v; want 0 rows: another relay leases it", n, err)
	}
	if row := rowOf(t, tb, ids[0]); row.Status != outbox.StatusDelivering || str(row.LockedBy) != "relay-2" {
		t.Errorf("row %s, want DELIVERING under relay-2", describe(row))
	}
}

func testHeldBatchBecomesALease(t *testing.T, h Harness) {
	tb := h.New(t)
	held := heldQueue(t, tb)
	ids := insertN(t, tb, 3, "e")
	b := claimHeld(t, held, storage.ClaimParams{RelayID: "relay-1", Limit: 10})
	lease, err := b.Tx.Lease(ctx, "relay-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		row := rowOf(t, tb, id)
		if row.Status != outbox.StatusDelivering || str(row.LockedBy) != "relay-1" || !lockedAt(row).Equal(lease.LockedAt) {
			t.Fatalf("row %s, want DELIVERING under relay-1 at %s", describe(row), lease.LockedAt)
		}
	}
	// The transaction has ended: other claims see the lease, and the
	// batch settles as a leased one.
	if got := claim(t, openSecond(t, tb), "relay-2", 10); len(got.Events) != 0 {
		t.Fatalf("another relay claimed %v of a leased batch", eventIDs(got.Events))
	}
	if err := b.Tx.Settle(ctx, storage.Outcome{Delivered: ids}); err == nil {
		t.Fatal("Settle after Lease succeeded, want an error: the transaction has ended")
	}
	if n, err := tb.Storage().Settle(ctx, lease, storage.Outcome{Delivered: ids}); err != nil || n.Delivered != len(ids) {
		t.Fatalf("Settle under the lease = %d, %v; want %d", n, err, len(ids))
	}
}

func testHeldOutcomeRecordedAfterTheTransactionEnded(t *testing.T, h Harness) {
	tb := h.New(t)
	held := heldQueue(t, tb)
	ids := insertN(t, tb, 3, "e")
	b := claimHeld(t, held, storage.ClaimParams{RelayID: "relay-1", Limit: 10})
	b.Tx.Abort()
	n, err := held.SettleHeld(ctx, b.Lease, storage.Outcome{
		Delivered: ids[:1],
		Failed:    []storage.Failure{{ID: ids[1], Error: "later", Delay: time.Hour}},
		Released:  ids[2:],
	})
	if err != nil || n != (storage.Settled{Delivered: 1, Failed: 1, Released: 1}) {
		t.Fatalf("SettleHeld = %+v, %v; want 1 row of each kind", n, err)
	}
	rows := byID(t, tb)
	if rows[ids[0]].Status != outbox.StatusDelivered || rows[ids[1]].Attempts != 1 || rows[ids[2]].Status != outbox.StatusPending {
		t.Fatalf("rows %s / %s / %s", describe(rows[ids[0]]), describe(rows[ids[1]]), describe(rows[ids[2]]))
	}
}
