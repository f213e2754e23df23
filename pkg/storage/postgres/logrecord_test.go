package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
	schema "github.com/outbox-relay/relay/schema/postgres"
)

// A fresh PENDING event holds its key only while the claims backfill it:
// otherwise the log delivers it, in order, itself.
func TestBlockedKeysCountFreshEventsOnlyDuringABackfill(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	ctx := context.Background()
	tb.Insert(t, pgtest.Event{PartitionKey: "k"}, pgtest.Event{PartitionKey: "k"}, pgtest.Event{PartitionKey: "j"})
	last, err := tb.Store.LastSeq(ctx)
	if err != nil {
		t.Fatal(err)
	}
	held, err := tb.Store.BlockedKeys(ctx, storage.BlockedKeysParams{Keys: []string{"k", "j"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != 0 {
		t.Fatalf("fresh events held keys outside a backfill: %v", held)
	}
	held, err = tb.Store.BlockedKeys(ctx, storage.BlockedKeysParams{Keys: []string{"k", "j", "none"}, Backfill: last})
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != 2 || held["k"] != last-2 || held["j"] != last {
		t.Fatalf("during a backfill up to %d: held %v, want k at %d and j at %d", last, held, last-2, last)
	}
	left, err := tb.Store.FreshLeft(ctx, last)
	if err != nil || !left {
		t.Fatalf("FreshLeft(%d) = %v, %v; want true", last, left, err)
	}
	if left, err := tb.Store.FreshLeft(ctx, last-3); err != nil || left {
		t.Fatalf("FreshLeft below every row = %v, %v; want false", left, err)
	}
}

// Beside the log, an ordered claim takes a key whose first event came back
// (failed, deferred) with its run only as far as the run is the claims':
// a fresh event after it is the log's, which publishes it, or defers it,
// in its turn. Taken by the claim too, it went twice once the claim had
// delivered the run before the log reached it.
func TestOrderedClaimsLeaveTheLogsEventsInARun(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	ctx := context.Background()
	ids := tb.Insert(t, pgtest.Event{PartitionKey: "k"}, pgtest.Event{PartitionKey: "k"}, pgtest.Event{PartitionKey: "k"}, pgtest.Event{PartitionKey: "k"})
	// The log published the first two events: the first failed, and the
	// second, held back behind it, was handed to the claims.
	if n, err := tb.Store.Record(ctx, storage.Outcome{Failed: []storage.Failure{{ID: ids[0], Error: "try again"}}}); err != nil || n.Failed != 1 {
		t.Fatalf("Record = %d, %v", n.Failed, err)
	}
	if n, err := tb.Store.Record(ctx, storage.Outcome{Released: ids[1:2]}); err != nil || n.Released != 1 {
		t.Fatalf("Record = %d, %v", n.Released, err)
	}
	p := storage.ClaimParams{RelayID: "r", Limit: 10, Ordering: storage.OrderingPartition, Fresh: storage.FreshEvents{ToLog: true}}
	b, err := tb.Store.Claim(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if got := eventIDs(b.Events); !slices.Equal(got, ids[:2]) {
		t.Fatalf("the claim took %d events of key k, want the 2 the log handed back (the other 2 are the log's)", len(got))
	}
	// During a backfill up to the third event, that one is the claims'
	// too; the fourth is still the log's.
	if _, err := tb.Store.Settle(ctx, b.Lease, storage.Outcome{Delivered: ids[:2]}); err != nil {
		t.Fatal(err)
	}
	if err := tb.Store.Pool().QueryRow(ctx, "SELECT seq FROM "+tb.Name+" WHERE event_id = $1", ids[2]).Scan(&p.Fresh.BackfillTo); err != nil {
		t.Fatal(err)
	}
	if b, err = tb.Store.Claim(ctx, p); err != nil {
		t.Fatal(err)
	}
	if got := eventIDs(b.Events); !slices.Equal(got, ids[2:3]) {
		t.Fatalf("a backfill up to the third event took %d events, want the third alone", len(got))
	}
}

// Beside the log, the claims take the fresh rows past the backfill only
// while no stream holds the table's log lock, and the lock a claim holds
// shared while it takes them makes a stream that starts wait for it
// (docs/architecture.md, "Capture from the WAL"). Before, the claims left
// fresh rows to the log whoever read it: while a slot took long to make,
// or a stream was lost, events waited 30 s for a timer (the randomized
// WAL test saw 10-19 s); and a relay past that timer claimed every event
// beside another relay's stream, which sent them again.
func TestClaimsBesideTheLogTakeFreshRowsWhileNoStreamHoldsTheLogLock(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	ctx := context.Background()
	ids := tb.Insert(t, pgtest.Event{}, pgtest.Event{}, pgtest.Event{})
	var backfill int64
	if err := tb.Store.Pool().QueryRow(ctx, "SELECT seq FROM "+tb.Name+" WHERE event_id = $1", ids[0]).Scan(&backfill); err != nil {
		t.Fatal(err)
	}
	p := storage.ClaimParams{RelayID: "r", Limit: 10, Fresh: storage.FreshEvents{ToLog: true, BackfillTo: backfill, WhenUnlocked: true}}
	release := tb.HoldLogLock(t)
	b, err := tb.Store.Claim(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if got := eventIDs(b.Events); !slices.Equal(got, ids[:1]) {
		t.Fatalf("while a stream holds the log lock the claim took %d events, want the one up to the backfill", len(got))
	}
	release()
	if b, err = tb.Store.Claim(ctx, p); err != nil {
		t.Fatal(err)
	}
	if got := eventIDs(b.Events); !slices.Equal(got, ids[1:]) {
		t.Fatalf("with no stream the claim took %d events, want the other 2", len(got))
	}
	// A claim's transaction holds the lock shared: a stream waits for it.
	tx, err := tb.Store.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var shared bool
	lock := "((" + fmt.Sprint(schema.LogLockClass) + "::bigint << 32) | $1::regclass::oid::bigint)"
	if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock_shared("+lock+")", tb.Name).Scan(&shared); err != nil || !shared {
		t.Fatalf("take the log lock shared: %v, %v", shared, err)
	}
	var exclusive bool
	if err := tb.Store.Pool().QueryRow(ctx, "SELECT pg_try_advisory_lock("+lock+")", tb.Name).Scan(&exclusive); err != nil || exclusive {
		t.Fatalf("a stream took the log lock beside a claim holding it shared: %v, %v", exclusive, err)
	}
}

// The log reader finds its rows by id and created_at, or by id alone where
// it could not read created_at, on a plain and a partitioned table; rows a
// claim took are left alone.
func TestRecordFindsDeliveredRowsByCreatedAtOrIDAlone(t *testing.T) {
	t.Parallel()
	for name, tb := range map[string]*pgtest.Table{"plain": pgtest.New(t), "partitioned": pgtest.NewPartitioned(t, "day")} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			ids := tb.Insert(t, pgtest.Event{}, pgtest.Event{}, pgtest.Event{})
			var created time.Time
			if err := tb.Store.Pool().QueryRow(ctx, "SELECT created_at FROM "+tb.Name+" WHERE event_id = $1", ids[0]).Scan(&created); err != nil {
				t.Fatal(err)
			}
			tb.Set(t, ids[2], "status = 'DELIVERING', locked_by = 'a claim', locked_at = now()")
			n, err := tb.Store.Record(ctx, storage.Outcome{Delivered: ids, CreatedAt: map[uuid.UUID]time.Time{ids[0]: created, ids[1]: {}}})
			if err != nil {
				t.Fatal(err)
			}
			if n.Delivered != 2 {
				t.Fatalf("recorded %+v, want 2 delivered (the claimed one is the claim's)", n)
			}
			if c := tb.Counts(t); c[outbox.StatusDelivered] != 2 || c[outbox.StatusDelivering] != 1 {
				t.Fatalf("counts %v", c)
			}
		})
	}
}

// One Record call records every kind at once, in one pipeline, each row
// found by its created_at or by id alone, and counts each kind; run again,
// as after a lost answer, it changes nothing: no row it changed is fresh.
func TestRecordEveryKindInOneCall(t *testing.T) {
	t.Parallel()
	for name, tb := range map[string]*pgtest.Table{"plain": pgtest.New(t), "partitioned": pgtest.NewPartitioned(t, "day")} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			ids := tb.Insert(t, pgtest.Event{}, pgtest.Event{}, pgtest.Event{}, pgtest.Event{})
			created := map[uuid.UUID]time.Time{}
			for _, id := range ids[:2] {
				var at time.Time
				if err := tb.Store.Pool().QueryRow(ctx, "SELECT created_at FROM "+tb.Name+" WHERE event_id = $1", id).Scan(&at); err != nil {
					t.Fatal(err)
				}
				created[id] = at
			}
			o := storage.Outcome{
				Delivered: ids[:1],
				Failed:    []storage.Failure{{ID: ids[1], Error: "later", Delay: time.Hour}, {ID: ids[2], Error: "bad", Dead: true}},
				Released:  ids[3:],
				CreatedAt: created,
			}
			if n, err := tb.Store.Record(ctx, o); err != nil || n != (storage.Settled{Delivered: 1, Failed: 2, Released: 1}) {
				t.Fatalf("Record = %+v, %v; want 1 delivered, 2 failed, 1 released", n, err)
			}
			if n, err := tb.Store.Record(ctx, o); err != nil || n != (storage.Settled{}) {
				t.Fatalf("Record again = %+v, %v; want nothing", n, err)
			}
			if c := tb.Counts(t); c[outbox.StatusDelivered] != 1 || c[outbox.StatusPending] != 2 || c[outbox.StatusDead] != 1 {
				t.Fatalf("counts %v", c)
			}
		})
	}
}
