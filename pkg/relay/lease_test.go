package relay_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/natstest"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/internal/tcpproxy"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/relay"
	"github.com/outbox-relay/relay/pkg/storage"
)

// sendCounter counts how often each event was handed to the broker.
type sendCounter struct {
	publisher.Publisher
	mu    sync.Mutex
	sends map[string]int
}

func (s *sendCounter) Publish(ctx context.Context, batch []outbox.Event) []error {
	s.mu.Lock()
	for _, e := range batch {
		s.sends[e.ID.String()]++
	}
	s.mu.Unlock()
	return s.Publisher.Publish(ctx, batch)
}

// TestSlowBrokerKeepsItsLeases: acknowledgements slower than LEASE_TIMEOUT
// must not let the reaper hand batches that are still being published to
// another claim, which would publish every event again and again.
func TestSlowBrokerKeepsItsLeases(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	srv := natstest.Start(t)
	st := srv.Stream(t, jetstream.StreamConfig{Name: "SLOW", Subjects: []string{"slow.>"}})
	proxy := tcpproxy.Start(t, srv.URL()[len("nats://"):])
	pub, err := publisher.Open(context.Background(), "nats://"+proxy.Addr()+"?timeout=30s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close(context.Background()) })
	eventually.True(t, 10*time.Second, func() bool { return pub.Ping(context.Background()) == nil },
		func() string { return "connected through the proxy" })
	proxy.DelayReplies(3 * time.Second)

	const n = 200
	tb.InsertN(t, n, "slow.event")
	counter := &sendCounter{Publisher: pub, sends: map[string]int{}}
	// Long enough that a renewal is not lost to a busy machine, short
	// enough that acknowledgements take twice as long.
	const lease = 1500 * time.Millisecond
	runReaper(t, tb, lease)
	start(t, relay.Config{BatchSize: 50, LeaseTimeout: lease}, tb.Store, counter)

	waitCounts(t, tb, time.Minute, map[outbox.Status]int{outbox.StatusDelivered: n})
	counter.mu.Lock()
	defer counter.mu.Unlock()
	for id, sends := range counter.sends {
		if sends != 1 {
			t.Fatalf("event %s was sent %d times; a slow broker made the relay publish it again", id, sends)
		}
	}
	if got := natstest.Count(t, st); got != n {
		t.Errorf("stream holds %d messages, want %d", got, n)
	}
	if burned := tb.Exec(t, "SELECT 1 FROM {{table}} WHERE attempts > 0"); burned != 0 {
		t.Errorf("%d events had attempts counted", burned)
	}
}

// lostAnswerStore lets its first renewal land and then reports it failed,
// as a connection that drops after the commit would.
type lostAnswerStore struct {
	storage.Queue
	lost atomic.Bool
}

func (s *lostAnswerStore) Renew(ctx context.Context, p storage.RenewParams) (int, error) {
	n, err := s.Queue.Renew(ctx, p)
	if err == nil && s.lost.CompareAndSwap(false, true) {
		return 0, errors.New("connection reset after commit")
	}
	return n, err
}

// TestALostRenewalAnswerLosesNoLease: the relay keeps the batch it renewed
// even when it never heard that the renewal landed, and settles it.
func TestALostRenewalAnswerLosesNoLease(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	srv := natstest.Start(t)
	srv.Stream(t, jetstream.StreamConfig{Name: "LOST", Subjects: []string{"lost.>"}})
	proxy := tcpproxy.Start(t, srv.URL()[len("nats://"):])
	pub, err := publisher.Open(context.Background(), "nats://"+proxy.Addr()+"?timeout=30s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close(context.Background()) })
	eventually.True(t, 10*time.Second, func() bool { return pub.Ping(context.Background()) == nil },
		func() string { return "connected through the proxy" })
	proxy.DelayReplies(time.Second)

	const n = 50
	tb.InsertN(t, n, "lost.event")
	store := &lostAnswerStore{Queue: tb.Store}
	counter := &sendCounter{Publisher: pub, sends: map[string]int{}}
	start(t, relay.Config{BatchSize: n, LeaseTimeout: 600 * time.Millisecond}, store, counter)

	waitCounts(t, tb, 30*time.Second, map[outbox.Status]int{outbox.StatusDelivered: n})
	if !store.lost.Load() {
		t.Fatal("no renewal happened; the broker was not slow enough")
	}
	counter.mu.Lock()
	defer counter.mu.Unlock()
	for id, sends := range counter.sends {
		if sends != 1 {
			t.Fatalf("event %s was sent %d times", id, sends)
		}
	}
}

// boundsStore records whether every settle of delivered rows carried the
// claim's created_at bounds.
type boundsStore struct {
	storage.Queue
	settles, unbounded atomic.Int64
}

func (s *boundsStore) Settle(ctx context.Context, lease storage.Lease, o storage.Outcome) (storage.Settled, error) {
	if len(o.Delivered) > 0 {
		s.settles.Add(1)
		if lease.CreatedFrom.IsZero() || lease.CreatedTo.IsZero() {
			s.unbounded.Add(1)
		}
	}
	return s.Queue.Settle(ctx, lease, o)
}

// TestARenewedLeaseKeepsItsCreatedAtBounds: the settle of a batch whose
// lease was renewed still names the claim's created_at range, so that on a
// partitioned table it looks in those partitions only.
func TestARenewedLeaseKeepsItsCreatedAtBounds(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	tb.InsertN(t, 20, "renewed.event")
	store := &boundsStore{Queue: tb.Store}
	gated := newGated(t)
	start(t, relay.Config{BatchSize: 20, LeaseTimeout: 600 * time.Millisecond}, store, gated)
	// Held at the broker for several renewals.
	eventually.True(t, 10*time.Second, func() bool { return tb.Counts(t)[outbox.StatusDelivering] == 20 },
		func() string { return "the batch leased" })
	time.AfterFunc(time.Second, func() { close(gated.open) })
	waitCounts(t, tb, 30*time.Second, map[outbox.Status]int{outbox.StatusDelivered: 20})
	if store.settles.Load() == 0 || store.unbounded.Load() != 0 {
		t.Errorf("%d of %d settles after renewals named no created_at bounds", store.unbounded.Load(), store.settles.Load())
	}
}
