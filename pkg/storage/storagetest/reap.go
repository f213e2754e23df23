package storagetest

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
)

// Taking back expired leases.

func reap(t *testing.T, tb Table, limit, maxAttempts int) storage.ReapResult {
	t.Helper()
	res, err := tb.Storage().Reap(ctx, storage.ReapParams{LeaseTimeout: time.Minute, Limit: limit, MaxAttempts: maxAttempts})
	if err != nil {
		t.Fatalf("Reap: %v", err)
	}
	return res
}

// testReapCountsAnAttemptAndBuriesAtTheLimit: an expired lease is a failed
// attempt, so an event that crashes every relay ends DEAD instead of
// looping forever.
func testReapCountsAnAttemptAndBuriesAtTheLimit(t *testing.T, h Harness) {
	tb := h.New(t)
	s := tb.Storage()
	ids := insertN(t, tb, 7, "e")
	requeue, bury, fresh, almost, pending, delivered, dead := ids[0], ids[1], ids[2], ids[3], ids[4], ids[5], ids[6]
	tb.Set(t, Change{Attempts: Ptr(4)}, bury)
	tb.Set(t, Change{Attempts: Ptr(2), LastError: Ptr("earlier")}, requeue)

	a := claim(t, s, "relay-a", 4) // requeue, bury, fresh, almost
	if got := eventIDs(a.Events); !sameSet(got, ids[:4]) {
		t.Fatalf("setup claimed %v", got)
	}
	tb.Set(t, Change{LockedAt: Ago(time.Hour)}, requeue, bury)
	tb.Set(t, Change{LockedAt: Ago(30 * time.Second)}, almost) // younger than the 1m timeout
	// Finished rows that still carry an old lease must not be reaped.
	tb.Set(t, Change{Status: outbox.StatusDelivered, DeliveredAt: Ago(0), LockedBy: Ptr("relay-a"), LockedAt: Ago(time.Hour)}, delivered)
	tb.Set(t, Change{Status: outbox.StatusDead, LockedBy: Ptr("relay-a"), LockedAt: Ago(time.Hour)}, dead)
	untouched := snapshot(t, tb)

	before := tb.Now(t)
	res := reap(t, tb, 100, 5)
	after := tb.Now(t)
	if res != (storage.ReapResult{Requeued: 1, Dead: 1}) {
		t.Fatalf("Reap = %+v, want 1 requeued and 1 dead", res)
	}

	rows := byID(t, tb)
	row := rows[requeue]
	if row.Status != outbox.StatusPending || row.Attempts != 3 || row.LockedBy != nil || row.LockedAt != nil {
		t.Errorf("requeued row = %s, want PENDING with 3 attempts, unlocked", describe(row))
	}
	if got := str(row.LastError); got != "lease expired (relay relay-a)" {
		t.Errorf("requeued row last_error = %q", got)
	}
	if row.AvailableAt.Before(before) || row.AvailableAt.After(after) {
		t.Errorf("requeued row available_at = %s, want the database's now (%s..%s)", row.AvailableAt, before, after)
	}
	row = rows[bury]
	if row.Status != outbox.StatusDead || row.Attempts != 5 || str(row.LastError) != "lease expired (relay relay-a)" || row.LockedBy != nil {
		t.Errorf("row reaching MaxAttempts = %s, want DEAD with 5 attempts and the lease error", describe(row))
	}
	if row.UpdatedAt.Before(before) || row.UpdatedAt.After(after) {
		t.Errorf("buried row updated_at = %s, want the moment it died", row.UpdatedAt)
	}
	for _, id := range []uuid.UUID{fresh, almost, pending, delivered, dead} {
		if got := describe(rows[id]); got != untouched[id] {
			t.Errorf("Reap changed a row it must leave alone:\nbefore %s\nafter  %s", untouched[id], got)
		}
	}

	// The requeued row is due at once; the live leases still settle.
	if b := claim(t, s, "relay-b", 10); !sameSet(eventIDs(b.Events), []uuid.UUID{requeue, pending}) {
		t.Errorf("claim after reap took %v, want %v and %v", eventIDs(b.Events), requeue, pending)
	}
	aged := storage.Lease{RelayID: "relay-a", LockedAt: lockedAt(rows[almost])}
	for _, l := range []struct {
		lease storage.Lease
		id    uuid.UUID
	}{{a.Lease, fresh}, {aged, almost}} {
		if n, err := s.Settle(ctx, l.lease, storage.Outcome{Delivered: []uuid.UUID{l.id}}); err != nil || n.Delivered != 1 {
			t.Errorf("settling a lease the reaper left alone = %d, %v; want 1", n.Delivered, err)
		}
	}
	if res := reap(t, tb, 100, 5); res != (storage.ReapResult{}) {
		t.Errorf("second Reap = %+v, want nothing", res)
	}
}

func testReapLimitTakesOldestLeasesFirst(t *testing.T, h Harness) {
	tb := h.New(t)
	ids := insertN(t, tb, 10, "e")
	claim(t, tb.Storage(), "relay-a", 10)
	for i, id := range ids {
		// The last row written holds the oldest lease, so that neither
		// insertion nor table order is the order leases expired in.
		tb.Set(t, Change{LockedAt: Ago(time.Hour + time.Duration(i)*time.Minute)}, id)
	}

	var rounds [][]uuid.UUID
	taken := map[uuid.UUID]bool{}
	for range 4 {
		res := reap(t, tb, 4, 100)
		if res.Dead != 0 {
			t.Fatalf("Reap sent %d rows DEAD below MaxAttempts", res.Dead)
		}
		var round []uuid.UUID
		for _, r := range tb.Rows(t) {
			if r.Status == outbox.StatusPending && !taken[r.ID] {
				round = append(round, r.ID)
				taken[r.ID] = true
			}
		}
		if len(round) != res.Requeued {
			t.Fatalf("Reap reported %d requeued, the table shows %d", res.Requeued, len(round))
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

func testReapWithMaxAttemptsOneBuriesAtOnce(t *testing.T, h Harness) {
	tb := h.New(t)
	ids := insertN(t, tb, 3, "e")
	claim(t, tb.Storage(), "relay-a", 3)
	tb.Set(t, Change{LockedAt: Ago(time.Hour)}, ids...)
	if res := reap(t, tb, 100, 1); res != (storage.ReapResult{Dead: 3}) {
		t.Fatalf("Reap = %+v, want 3 dead", res)
	}
	if c := counts(t, tb); c[outbox.StatusDead] != 3 {
		t.Fatalf("counts = %v", c)
	}
}
