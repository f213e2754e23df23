package relay_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/natstest"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/relay"
	"github.com/outbox-relay/relay/pkg/storage"
)

// listen runs the engine's notification listener until the test ends.
func listen(t *testing.T, r *running, l storage.Notifier) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.engine.Listen(ctx, l); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// pollForever is long enough that only a notification can wake the engine
// within a test's lifetime.
const pollForever = time.Hour

func TestInsertNotificationWakesTheRelay(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	srv := natstest.Start(t)
	srv.Stream(t, jetstream.StreamConfig{Name: "WAKE", Subjects: []string{"wake.>"}})
	r := start(t, relay.Config{PollInterval: pollForever}, tb.Store, openNATS(t, srv, ""))
	listen(t, r, tb.Store)

	for i := range 5 {
		tb.InsertN(t, 1, "wake.event")
		waitCounts(t, tb, 10*time.Second, map[outbox.Status]int{outbox.StatusDelivered: i + 1})
	}
}

func TestListenerReconnectsWhenItsConnectionDrops(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	srv := natstest.Start(t)
	srv.Stream(t, jetstream.StreamConfig{Name: "RECONNECT", Subjects: []string{"reconnect.>"}})
	r := start(t, relay.Config{PollInterval: pollForever}, tb.Store, openNATS(t, srv, ""))
	listen(t, r, tb.Store)

	tb.InsertN(t, 1, "reconnect.event")
	waitCounts(t, tb, 10*time.Second, map[outbox.Status]int{outbox.StatusDelivered: 1})

	listening := `LISTEN "` + tb.Name + `"` // the channel is the schema-qualified name
	// The first event may have gone out with the engine's first claim,
	// before the listener ran LISTEN: wait until there is one to cut.
	eventually.True(t, 10*time.Second, func() bool {
		return tb.Exec(t, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = $1", listening) == 1
	}, func() string { return "a listening connection to terminate" })
	// The new listener announces itself by waking the engine; an insert after
	// it is listening must arrive without any poll.
	eventually.True(t, 10*time.Second, func() bool {
		return tb.Exec(t, "SELECT 1 FROM pg_stat_activity WHERE query = $1", listening) == 1
	}, func() string { return "a new listening connection" })
	tb.InsertN(t, 1, "reconnect.event")
	waitCounts(t, tb, 10*time.Second, map[outbox.Status]int{outbox.StatusDelivered: 2})
}

// countingStore counts claims.
type countingStore struct {
	storage.Queue
	claims atomic.Int64
}

func (s *countingStore) Claim(ctx context.Context, p storage.ClaimParams) (storage.Batch, error) {
	s.claims.Add(1)
	return s.Queue.Claim(ctx, p)
}

func TestNotificationBurstsAreDebounced(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	srv := natstest.Start(t)
	srv.Stream(t, jetstream.StreamConfig{Name: "BURST", Subjects: []string{"burst.>"}})
	store := &countingStore{Queue: tb.Store}
	r := start(t, relay.Config{PollInterval: pollForever, NotifyDebounce: 100 * time.Millisecond}, store, openNATS(t, srv, ""))
	listen(t, r, tb.Store)

	const n = 300
	began := time.Now()
	for range n {
		tb.InsertN(t, 1, "burst.event") // one transaction, one notification each
	}
	waitCounts(t, tb, 30*time.Second, map[outbox.Status]int{outbox.StatusDelivered: n})
	took := time.Since(began)
	// At most one claim per debounce window, plus the trailing one and the
	// claims that follow a full batch.
	if most := int64(took/(100*time.Millisecond)) + 5; store.claims.Load() > most {
		t.Fatalf("%d claims for %d single-row inserts over %s, want at most %d", store.claims.Load(), n, took, most)
	}
}

// With the poll an hour away, only the engine's wait for the next due row
// (storage.DueWatcher) can deliver a scheduled event: its insert wakes the
// engine before the event is due, and the claim then finds nothing.
func TestScheduledEventWakesTheRelayWhenDue(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	srv := natstest.Start(t)
	srv.Stream(t, jetstream.StreamConfig{Name: "DUE", Subjects: []string{"due.>"}})
	r := start(t, relay.Config{PollInterval: pollForever}, tb.Store, openNATS(t, srv, ""))
	listen(t, r, tb.Store)

	for i := range 3 {
		tb.Insert(t, pgtest.Event{Type: "due.event", AvailableIn: 300 * time.Millisecond})
		waitCounts(t, tb, 10*time.Second, map[outbox.Status]int{outbox.StatusDelivered: i + 1})
	}
}

// failFirst fails each event's first attempt with a retryable error.
type failFirst struct {
	publisher.Publisher
	mu   sync.Mutex
	seen map[uuid.UUID]bool
}

func (f *failFirst) Publish(ctx context.Context, batch []outbox.Event) []error {
	f.mu.Lock()
	var retry []int
	for i, ev := range batch {
		if !f.seen[ev.ID] {
			f.seen[ev.ID] = true
			retry = append(retry, i)
		}
	}
	f.mu.Unlock()
	errs := f.Publisher.Publish(ctx, batch)
	for _, i := range retry {
		errs[i] = errors.New("injected first failure")
	}
	return errs
}

// A retry that backs off is due when no insert notifies anyone: with the
// poll an hour away, only the wait for the next due row delivers it. (The
// engine may ask when the next row is due before or after the failure's
// settle lands; the wake in settle covers the second order, which this
// test does not force.)
func TestBackedOffRetryWakesTheRelayWhenDue(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	srv := natstest.Start(t)
	srv.Stream(t, jetstream.StreamConfig{Name: "RETRYDUE", Subjects: []string{"retrydue.>"}})
	pub := &failFirst{Publisher: openNATS(t, srv, ""), seen: map[uuid.UUID]bool{}}
	r := start(t, relay.Config{PollInterval: pollForever, Retry: relay.RetryPolicy{
		MaxAttempts: 3, BaseDelay: 200 * time.Millisecond, MaxDelay: 200 * time.Millisecond,
	}}, tb.Store, pub)
	listen(t, r, tb.Store)

	ids := tb.InsertN(t, 1, "retrydue.event")
	waitCounts(t, tb, 10*time.Second, map[outbox.Status]int{outbox.StatusDelivered: 1})
	if row := tb.Get(t, ids[0]); row.Attempts != 1 {
		t.Fatalf("delivered after %d failed attempts, want 1", row.Attempts)
	}
}
