package relay_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/relay"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/postgres"
)

// Held claims (LEASE_MODE=lock): a batch's rows stay PENDING under the row
// locks of the claim's transaction while it is at the broker.

// gatedPublisher holds every publish (with once, the first only) until
// open is closed, then passes it on, counting each event sent.
type gatedPublisher struct {
	*sendCounter
	open    chan struct{}
	once    bool
	calls   atomic.Int64
	waiting atomic.Int64
}

func newGated(t *testing.T) *gatedPublisher {
	t.Helper()
	pub, err := publisher.Open(context.Background(), "null://")
	if err != nil {
		t.Fatal(err)
	}
	return &gatedPublisher{sendCounter: &sendCounter{Publisher: pub, sends: map[string]int{}}, open: make(chan struct{})}
}

func (g *gatedPublisher) Publish(ctx context.Context, batch []outbox.Event) []error {
	if g.calls.Add(1) > 1 && g.once {
		return g.sendCounter.Publish(ctx, batch)
	}
	g.waiting.Add(1)
	select {
	case <-g.open:
	case <-ctx.Done():
	}
	g.waiting.Add(-1)
	return g.sendCounter.Publish(ctx, batch)
}

// sent is how many events went to the broker, and the most times one did.
func (s *sendCounter) sent() (events, most int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.sends {
		events++
		most = max(most, n)
	}
	return events, most
}

// claimCounter counts an engine's claims and its failed settles.
type claimCounter struct {
	relay.NopObserver
	claims, settleErrors atomic.Int64
}

func (c *claimCounter) StartClaim(ctx context.Context) (context.Context, func(int, error)) {
	return ctx, func(int, error) { c.claims.Add(1) }
}

func (c *claimCounter) StartSettle(ctx context.Context, _ string, _ int) (context.Context, func(error)) {
	return ctx, func(err error) {
		if err != nil {
			c.settleErrors.Add(1)
		}
	}
}

// TestAHeldBatchIsNoOtherRelaysToClaim: while a held batch waits at the
// broker its rows read PENDING, and another relay, claiming all the while,
// takes none of them.
func TestAHeldBatchIsNoOtherRelaysToClaim(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	const n = 40
	tb.InsertN(t, n, "held.event")
	gated := newGated(t)
	start(t, relay.Config{RelayID: "holder", BatchSize: n, LeaseMode: relay.LeaseLock, HeldMax: time.Minute}, tb.Store, gated)
	eventually.True(t, 10*time.Second, func() bool { return tb.Held(t) == n },
		func() string { return "the batch held" })
	if c := tb.Counts(t); c[outbox.StatusPending] != n {
		t.Fatalf("status counts %v while the batch is at the broker, want all %d PENDING", c, n)
	}

	other := newGated(t)
	close(other.open)
	watch := &claimCounter{}
	start(t, relay.Config{RelayID: "other", PollInterval: 10 * time.Millisecond, Observer: watch}, tb.Store, other)
	eventually.True(t, 10*time.Second, func() bool { return watch.claims.Load() >= 5 },
		func() string { return "the other relay claiming" })
	if events, _ := other.sent(); events != 0 {
		t.Fatalf("the other relay published %d held events", events)
	}

	close(gated.open)
	waitCounts(t, tb, 30*time.Second, map[outbox.Status]int{outbox.StatusDelivered: n})
	if events, most := gated.sent(); events != n || most != 1 {
		t.Errorf("the holder sent %d events, one as often as %d times; want %d once each", events, most, n)
	}
	if events, _ := other.sent(); events != 0 {
		t.Errorf("the other relay published %d events", events)
	}
}

// TestHeldClaimsOutliveARolesIdleTimeout: a DBA's
// idle_in_transaction_session_timeout, shorter than a publish, must not end
// the claims' transactions (nor make the relay publish anything twice):
// the claim sets its own, LEASE_TIMEOUT.
func TestHeldClaimsOutliveARolesIdleTimeout(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	role, roleURL := tb.Login(t, "SELECT, UPDATE")
	tb.Exec(t, "ALTER ROLE "+role+" SET idle_in_transaction_session_timeout = '100ms'")
	store, err := postgres.Open(context.Background(), roleURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)

	const n = 60
	tb.InsertN(t, n, "idle.event")
	slow := newGated(t)
	watch := &claimCounter{}
	start(t, relay.Config{BatchSize: 20, LeaseMode: relay.LeaseLock, HeldMax: time.Minute, Observer: watch}, store, slow)
	// Each batch waits at the broker for several of the role's timeouts.
	eventually.True(t, 10*time.Second, func() bool { return slow.waiting.Load() > 0 },
		func() string { return "a batch at the broker" })
	time.AfterFunc(500*time.Millisecond, func() { close(slow.open) })

	waitCounts(t, tb, 30*time.Second, map[outbox.Status]int{outbox.StatusDelivered: n})
	if events, most := slow.sent(); events != n || most != 1 {
		t.Errorf("sent %d events, one as often as %d times; want %d once each", events, most, n)
	}
	if failed := watch.settleErrors.Load(); failed != 0 {
		t.Errorf("%d settles failed: the database ended a held claim's transaction", failed)
	}
}

// TestAHeldBatchWhoseConnectionDiesIsDeliveredAnyway: when the database
// ends a held claim's transaction while its batch is at the broker (a
// failover, an administrator's pg_terminate_backend), its rows are PENDING
// again and are delivered, by another relay or the holder's own sweep; the
// holder's first publish, which succeeded after all, records its outcome
// without harm.
func TestAHeldBatchWhoseConnectionDiesIsDeliveredAnyway(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	app := "held_" + fmt.Sprint(time.Now().UnixNano())
	store, err := postgres.Open(context.Background(), tb.URL+"&application_name="+app)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	const n = 30
	tb.InsertN(t, n, "died.event")
	gated := newGated(t)
	gated.once = true
	start(t, relay.Config{RelayID: "holder", BatchSize: n, LeaseMode: relay.LeaseLock, HeldMax: time.Minute,
		SweepInterval: 200 * time.Millisecond}, store, gated)
	// Held locks rows to count them, which would make the claim skip some
	// and leave them to the holder's second, ungated, publish: probe only
	// once the first batch is at the broker.
	eventually.True(t, 10*time.Second, func() bool { return gated.waiting.Load() == 1 },
		func() string { return "the batch at the broker" })
	if held := tb.Held(t); held != n {
		t.Fatalf("%d rows held while the batch is at the broker, want all %d", held, n)
	}
	eventually.True(t, 10*time.Second, func() bool {
		return tb.Exec(t, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND state = 'idle in transaction'", app) == 1
	}, func() string { return "the held claim's session terminated" })

	other := newGated(t)
	close(other.open)
	start(t, relay.Config{RelayID: "other", SweepInterval: 200 * time.Millisecond, PollInterval: 20 * time.Millisecond}, tb.Store, other)
	// Either relay may take them again: the other's claims, or the
	// holder's once its settle fails and it watches their writers again.
	waitCounts(t, tb, 30*time.Second, map[outbox.Status]int{outbox.StatusDelivered: n})
	close(gated.open)
	eventually.True(t, 10*time.Second, func() bool { return gated.waiting.Load() == 0 },
		func() string { return "the holder's first publish done" })
	waitCounts(t, tb, 10*time.Second, map[outbox.Status]int{outbox.StatusDelivered: n})
}

// TestABatchTheBrokerIsSlowWithBecomesALease: a held claim's transaction
// holds vacuum's horizon back, so a batch still at the broker after
// HeldMax is leased instead, and settled as a leased batch, once.
func TestABatchTheBrokerIsSlowWithBecomesALease(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	const n = 30
	tb.InsertN(t, n, "slow.event")
	gated := newGated(t)
	start(t, relay.Config{BatchSize: n, LeaseMode: relay.LeaseLock, HeldMax: 200 * time.Millisecond}, tb.Store, gated)
	eventually.True(t, 10*time.Second, func() bool { return tb.Counts(t)[outbox.StatusDelivering] == n },
		func() string { return fmt.Sprintf("the batch leased, counts %v", tb.Counts(t)) })
	if held := tb.Held(t); held != 0 {
		t.Errorf("%d rows still held by an open transaction", held)
	}
	close(gated.open)
	waitCounts(t, tb, 30*time.Second, map[outbox.Status]int{outbox.StatusDelivered: n})
	if events, most := gated.sent(); events != n || most != 1 {
		t.Errorf("sent %d events, one as often as %d times; want %d once each", events, most, n)
	}
}

// TestLeaseModeLockNeedsAStorageThatHoldsClaims: asked to hold claims on a
// storage that cannot (MySQL today), the relay refuses to start rather than
// lease them by status unasked.
func TestLeaseModeLockNeedsAStorageThatHoldsClaims(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	leasing := struct{ storage.Queue }{tb.Store} // hides HeldQueue
	_, err := relay.New(relay.Config{RelayID: "r", LeaseMode: relay.LeaseLock}, leasing, newGated(t))
	if err == nil || !strings.Contains(err.Error(), "LeaseMode lock: this storage cannot hold claims") {
		t.Fatalf("relay.New = %v, want the storage refused for LeaseMode lock", err)
	}
	if _, err := relay.New(relay.Config{RelayID: "r"}, leasing, newGated(t)); err != nil {
		t.Fatalf("relay.New with LeaseMode auto = %v, want it to lease by status", err)
	}
}

// A claim cut short by its byte limit says so (Batch.Full), and the engine
// claims again at once: small events each followed by one that fills the
// byte limit make batches of a few bytes, which the engine would otherwise
// take for the end of the backlog and wait out its poll interval (an hour
// here) after. A transaction held open meanwhile, as on any busy database,
// stays in the claim frontier's watch: the rows a cut batch left must not
// be passed then either.
func TestClaimsCutByTheirByteLimitClaimAgainAtOnce(t *testing.T) {
	t.Parallel()
	for _, mode := range []relay.LeaseMode{relay.LeaseLock, relay.LeaseStatus} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			tb := pgtest.New(t)
			var events []pgtest.Event
			for range 20 {
				events = append(events,
					pgtest.Event{Payload: []byte("{}")},
					pgtest.Event{Payload: []byte(`"` + strings.Repeat("p", 5000) + `"`)})
			}
			tb.Insert(t, events...)
			tb.HoldWriter(t)
			pub, err := publisher.Open(context.Background(), "null://")
			if err != nil {
				t.Fatal(err)
			}
			start(t, relay.Config{PollInterval: time.Hour, MaxBatchBytes: 5000, LeaseMode: mode}, tb.Store, pub)
			waitCounts(t, tb, 30*time.Second, map[outbox.Status]int{outbox.StatusDelivered: len(events)})
		})
	}
}
