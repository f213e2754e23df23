package storagetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
)

// Creating and checking the table; what a missing table means to every
// method; what each method returns when nothing matches.

// testMissingTableThenMigrateTwice: before Migrate, Check and every admin
// method name the missing table; Migrate creates it (once, however many
// run at the same moment); running it again changes nothing.
func testMissingTableThenMigrateTwice(t *testing.T, h Harness) {
	s := h.Unmigrated(t)
	if err := s.Check(ctx); !errors.Is(err, storage.ErrTableMissing) {
		t.Fatalf("Check before Migrate = %v, want ErrTableMissing", err)
	} else if !strings.Contains(err.Error(), "relay-cli migrate") || !strings.Contains(err.Error(), s.Table()) {
		t.Errorf("Check = %q, want it to name the table %s and `relay-cli migrate`", err, s.Table())
	}
	calls := map[string]func() error{
		"Backlog": func() error { _, err := s.Backlog(ctx); return err },
		"Stats":   func() error { _, err := s.Stats(ctx, storage.StatsParams{}); return err },
		"Prune": func() error {
			_, err := s.Prune(ctx, storage.PruneParams{Status: outbox.StatusDelivered})
			return err
		},
		"RetryDead": func() error { _, err := s.RetryDead(ctx, storage.RetryDeadParams{}); return err },
		"List":      func() error { _, err := s.List(ctx, storage.ListParams{}); return err },
		"Get":       func() error { _, err := s.Get(ctx, uuid.New()); return err },
		"Emit":      func() error { _, err := s.Emit(ctx, storage.EmitParams{Type: "t", Count: 1}); return err },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, storage.ErrTableMissing) || !strings.Contains(err.Error(), "relay-cli migrate") {
			t.Errorf("%s on a missing table: %v, want ErrTableMissing and a hint to migrate", name, err)
		}
	}
	if s.SchemaSQL() == "" || s.GrantsSQL() == "" {
		t.Error("SchemaSQL or GrantsSQL is empty")
	}

	// Several relays starting with STORAGE_AUTO_MIGRATE at once.
	const n = 3
	results := make([]storage.MigrateResult, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { results[i], errs[i] = s.Migrate(ctx, storage.MigrateOptions{}) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent Migrate: %v", err)
	}
	var first storage.MigrateResult
	creators := 0
	for _, r := range results {
		if len(r.Created) > 0 {
			creators++
			first = r
		}
	}
	if creators != 1 {
		t.Fatalf("%d of %d concurrent migrations report creating objects (%+v), want 1", creators, n, results)
	}
	for _, r := range results {
		if len(r.Created) == 0 && !sameStrings(r.Existed, first.Created) {
			t.Errorf("a migration that created nothing found %q, want what the first created %q", r.Existed, first.Created)
		}
	}
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check after Migrate: %v", err)
	}

	again, err := s.Migrate(ctx, storage.MigrateOptions{})
	if err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
	if len(again.Created) != 0 || !sameStrings(again.Existed, first.Created) {
		t.Errorf("Migrate again = created %q, existed %q; want nothing created and %q existing", again.Created, again.Existed, first.Created)
	}
	// The table works.
	ids, err := s.Emit(ctx, storage.EmitParams{Type: "t", Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	if b := claim(t, s, "r", 10); !slices.Equal(eventIDs(b.Events), ids) {
		t.Errorf("claimed %v from the migrated table, want %v", eventIDs(b.Events), ids)
	}
}

func sameStrings(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// testNothingMatches: every method on an empty table, and on rows it must
// not touch, answers with nothing and no error.
func testNothingMatches(t *testing.T, h Harness) {
	tb := h.New(t)
	s := tb.Storage()
	check := func(what string, n int64, err error) {
		t.Helper()
		if err != nil || n != 0 {
			t.Errorf("%s = %d, %v; want 0 and no error", what, n, err)
		}
	}
	for round, setup := range []func(){
		func() {},
		// Rows that match nothing below: not due, leased by another
		// relay, delivered recently, dead recently.
		func() {
			ids := insertN(t, tb, 4, "other")
			tb.Set(t, Change{AvailableAt: Ago(-time.Hour)}, ids[0])
			tb.Set(t, Change{Status: outbox.StatusDelivering, LockedBy: Ptr("other"), LockedAt: Ago(0)}, ids[1])
			tb.Set(t, Change{Status: outbox.StatusDelivered, DeliveredAt: Ago(0)}, ids[2])
			tb.Set(t, Change{Status: outbox.StatusDead, UpdatedAt: Ago(0)}, ids[3])
		},
	} {
		setup()
		before := snapshot(t, tb)
		for _, p := range []storage.ClaimParams{
			{RelayID: "r", Limit: 10},
			{RelayID: "r", Limit: 10, Ordering: storage.OrderingPartition, OnDead: storage.DeadSkip},
			{RelayID: "r", Limit: 10, Ordering: storage.OrderingPartition, OnDead: storage.DeadBlock, After: "zzz"},
		} {
			b, err := s.Claim(ctx, p)
			check("Claim "+string(p.Ordering), int64(len(b.Events)), err)
		}
		lease := storage.Lease{RelayID: "r", LockedAt: time.Now().Truncate(time.Microsecond)}
		for _, ids := range [][]uuid.UUID{nil, {uuid.New()}} {
			var fs []storage.Failure
			for _, id := range ids {
				fs = append(fs, storage.Failure{ID: id, Error: "x"})
			}
			for _, o := range []storage.Outcome{{Delivered: ids}, {Delivered: ids, Delete: true}, {Failed: fs}, {Released: ids},
				{Delivered: ids, Failed: fs, Released: ids}} {
				settled, err := s.Settle(ctx, lease, o)
				check(fmt.Sprintf("Settle %+v", o), int64(settled.Len()), err)
			}
			n, err := s.Renew(ctx, storage.RenewParams{Lease: lease, IDs: ids, To: lease.LockedAt.Add(time.Second)})
			check("Renew", int64(n), err)
		}
		res, err := s.Reap(ctx, storage.ReapParams{LeaseTimeout: time.Minute, Limit: 10, MaxAttempts: 5})
		if err != nil || res != (storage.ReapResult{}) {
			t.Errorf("Reap = %+v, %v; want nothing", res, err)
		}
		for _, st := range []outbox.Status{outbox.StatusDelivered, outbox.StatusDead} {
			for _, dry := range []bool{true, false} {
				res, err := s.Prune(ctx, storage.PruneParams{Status: st, OlderThan: time.Hour, DryRun: dry})
				check("Prune "+string(st), res.Deleted, err)
			}
		}
		for _, dry := range []bool{true, false} {
			n, err := s.RetryDead(ctx, storage.RetryDeadParams{DeadFilter: storage.DeadFilter{EventType: "none"}, DryRun: dry})
			check("RetryDead", n, err)
		}
		rows, err := s.List(ctx, storage.ListParams{EventType: "none"})
		check("List", int64(len(rows)), err)
		if _, err := s.Get(ctx, uuid.New()); !errors.Is(err, storage.ErrEventNotFound) {
			t.Errorf("Get of an unknown id = %v, want ErrEventNotFound", err)
		}
		requireUnchanged(t, "operations that matched nothing", before, snapshot(t, tb))

		if round == 0 {
			b, err := s.Backlog(ctx)
			if err != nil || b != (storage.Backlog{}) {
				t.Errorf("Backlog of an empty table = %+v, %v; want zeros", b, err)
			}
			st, err := s.Stats(ctx, storage.StatsParams{})
			if err != nil {
				t.Fatal(err)
			}
			if st.Backlog != (storage.Backlog{}) || st.Delivering != 0 || st.Delivered != 0 || st.DeliveredLastHour != 0 ||
				len(st.TopTypes) != 0 || len(st.Leases) != 0 || len(st.BlockedKeys) != 0 || st.ObservedAt.IsZero() {
				t.Errorf("Stats of an empty table = %+v, want zeros and an ObservedAt", st)
			}
			rows, err := s.List(ctx, storage.ListParams{})
			check("List of an empty table", int64(len(rows)), err)
		}
	}
}

// testNotifier: a storage that offers a Notifier announces itself once it
// listens, wakes the listener for inserts and for retried DEAD events, and
// returns nil when its context ends.
func testNotifier(t *testing.T, h Harness) {
	tb := h.New(t)
	n, ok := tb.Storage().(storage.Notifier)
	if !ok {
		t.Skip("the storage offers no Notifier: relays poll")
	}
	heard := make(chan struct{}, 64)
	listenCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- n.Listen(listenCtx, func() { heard <- struct{}{} }) }()
	wait := func(what string) {
		t.Helper()
		select {
		case <-heard:
		case err := <-done:
			t.Fatalf("Listen ended while waiting for %s: %v", what, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("no notification for %s", what)
		}
	}
	wait("the start") // events may have been committed while no one listened
	ids := insertN(t, tb, 3, "e")
	wait("an insert")

	// A retried DEAD event wakes relays as an insert would.
	b := claim(t, tb.Storage(), "r", 1)
	if n, err := tb.Storage().Settle(ctx, b.Lease, storage.Outcome{Failed: []storage.Failure{{ID: ids[0], Error: "x", Dead: true}}}); err != nil || n.Failed != 1 {
		t.Fatalf("Settle = %d, %v", n.Failed, err)
	}
	drain(heard)
	if n, err := tb.Storage().RetryDead(ctx, storage.RetryDeadParams{}); err != nil || n != 1 {
		t.Fatalf("RetryDead = %d, %v", n, err)
	}
	wait("a retried DEAD event")

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Listen returned %v when its context ended, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Listen did not return when its context ended")
	}
}

func drain(c chan struct{}) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}

// RequireInterrupted checks that s's Check and Migrate, called with a
// cancelled context (an operator's Ctrl-C), say they were interrupted —
// not that the server cannot be reached, nor to check that it runs — keep
// context.Canceled for errors.Is, and do not show secret, the password of
// s's URL. Drivers call it from a test of their own, with a store opened
// by a URL that has a password.
func RequireInterrupted(t *testing.T, s storage.Storage, secret string) {
	t.Helper()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	errs := map[string]error{"Check": s.Check(cancelled)}
	_, errs["Migrate"] = s.Migrate(cancelled, storage.MigrateOptions{})
	for op, err := range errs {
		if err == nil {
			t.Fatalf("%s with a cancelled context succeeded", op)
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "interrupted: ") || strings.Contains(msg, "cannot reach") || strings.Contains(msg, "server is running") {
			t.Errorf("%s = %q, want it to say it was interrupted, and no more that the server cannot be reached", op, msg)
		}
		if errors.Is(err, storage.ErrUnreachable) || !errors.Is(err, context.Canceled) {
			t.Errorf("%s = %v: matches ErrUnreachable, or not context.Canceled", op, err)
		}
		if strings.Contains(msg, secret) {
			t.Errorf("%s = %q leaks the password", op, msg)
		}
	}
}
