package relay_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/natstest"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/reaper"
	"github.com/outbox-relay/relay/pkg/relay"
	"github.com/outbox-relay/relay/pkg/storage"
)

// keyedEvent is the payload the ordering tests write: the key again and the
// event's place among its key's events.
type keyedEvent struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

// insertKeyed writes perKey events for each of keys, in txs transactions,
// the keys interleaved, and returns how many it wrote.
func insertKeyed(t *testing.T, tb *pgtest.Table, eventType string, keys, perKey, txs int) int {
	t.Helper()
	var all []pgtest.Event
	for n := range perKey {
		for k := range keys {
			key := fmt.Sprintf("key-%03d", k)
			payload, _ := json.Marshal(keyedEvent{Key: key, N: n})
			all = append(all, pgtest.Event{Type: eventType, PartitionKey: key, Payload: payload})
		}
	}
	per := (len(all) + txs - 1) / txs
	for i := 0; i < len(all); i += per {
		tb.Insert(t, all[i:min(i+per, len(all))]...)
	}
	return len(all)
}

// requireKeyOrder checks that, reading the stream in order and keeping the
// first copy of each event, every key's events arrived in the order they
// were written.
func requireKeyOrder(t *testing.T, st jetstream.Stream, wantEvents int) {
	t.Helper()
	seen := map[string]bool{}
	next := map[string]int{}
	for _, m := range natstest.Messages(t, st) {
		id := m.Header.Get("Nats-Msg-Id")
		if seen[id] {
			continue
		}
		seen[id] = true
		var e keyedEvent
		if err := json.Unmarshal(m.Data, &e); err != nil {
			t.Fatalf("payload %q: %v", m.Data, err)
		}
		if e.N != next[e.Key] {
			t.Fatalf("key %s: event %d arrived when event %d was due", e.Key, e.N, next[e.Key])
		}
		next[e.Key]++
	}
	if len(seen) != wantEvents {
		t.Fatalf("%d distinct events reached the broker, want %d", len(seen), wantEvents)
	}
}

// flakyPublisher fails a fifth of its calls with a retryable error: half of
// those before sending anything, half after the broker took the batch, so
// the relay publishes again events the broker already has. A further tenth
// of its calls fail some events and send the others.
type flakyPublisher struct {
	publisher.Publisher
	mu  sync.Mutex
	rnd *rand.Rand
}

func newFlaky(p publisher.Publisher, seed uint64) *flakyPublisher {
	return &flakyPublisher{Publisher: p, rnd: rand.New(rand.NewPCG(seed, 7))}
}

func (f *flakyPublisher) Publish(ctx context.Context, batch []outbox.Event) []error {
	f.mu.Lock()
	roll := f.rnd.IntN(10)
	drop := make([]bool, len(batch))
	for i := range drop {
		drop[i] = f.rnd.IntN(2) == 0
	}
	f.mu.Unlock()
	injected := errors.New("injected failure")
	switch roll {
	case 0:
		return publisher.Fill(len(batch), injected)
	case 1:
		f.Publisher.Publish(ctx, batch)
		return publisher.Fill(len(batch), injected)
	case 2:
		errs := make([]error, len(batch))
		var pass []outbox.Event
		var passIdx []int
		for i, e := range batch {
			if drop[i] {
				errs[i] = injected
				continue
			}
			pass = append(pass, e)
			passIdx = append(passIdx, i)
		}
		for j, err := range f.Publisher.Publish(ctx, pass) {
			errs[passIdx[j]] = err
		}
		return errs
	}
	return f.Publisher.Publish(ctx, batch)
}

// crashable makes an engine stop dead, as SIGKILL would: once crashed its
// store and publisher do nothing more, leaving its leases to the reaper.
type crashable struct {
	crashed atomic.Bool
}

var errCrashed = errors.New("process is gone")

type crashStore struct {
	storage.Queue
	c *crashable
}

func (s crashStore) Claim(ctx context.Context, p storage.ClaimParams) (storage.Batch, error) {
	if s.c.crashed.Load() {
		return storage.Batch{}, errCrashed
	}
	return s.Queue.Claim(ctx, p)
}

func (s crashStore) Settle(ctx context.Context, lease storage.Lease, o storage.Outcome) (storage.Settled, error) {
	if s.c.crashed.Load() {
		return storage.Settled{}, errCrashed
	}
	return s.Queue.Settle(ctx, lease, o)
}

type crashPublisher struct {
	publisher.Publisher
	c *crashable
}

func (p crashPublisher) Publish(ctx context.Context, batch []outbox.Event) []error {
	if p.c.crashed.Load() {
		return publisher.Fill(len(batch), publisher.Unavailable(errCrashed))
	}
	return p.Publisher.Publish(ctx, batch)
}

func runReaper(t *testing.T, tb *pgtest.Table, lease time.Duration) {
	t.Helper()
	rp, err := reaper.New(reaper.Config{Interval: 100 * time.Millisecond, LeaseTimeout: lease, BatchSize: 1000, MaxAttempts: 1000}, tb.Store)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { rp.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func partitionConfig(id string) relay.Config {
	return relay.Config{
		RelayID:            id,
		Ordering:           storage.OrderingPartition,
		BatchSize:          100,
		MaxInFlightBatches: 3,
		LeaseTimeout:       2 * time.Second,
		Retry:              relay.RetryPolicy{MaxAttempts: 1000, BaseDelay: 5 * time.Millisecond, MaxDelay: 50 * time.Millisecond, Jitter: 0.5},
	}
}

// TestPartitionOrderSurvivesFailuresAndACrash is the ordering guarantee
// under fire: three relays on one table, a publisher that fails a fifth of
// its calls (sometimes after the broker took the batch), and one relay
// killed mid-run.
func TestPartitionOrderSurvivesFailuresAndACrash(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	srv := natstest.Start(t)
	st := srv.Stream(t, jetstream.StreamConfig{Name: "ORDERED", Subjects: []string{"ordered.>"}, Duplicates: 10 * time.Minute})
	n := insertKeyed(t, tb, "ordered.event", 40, 50, 20)

	runReaper(t, tb, 2*time.Second)
	victim := &crashable{}
	for i := range 3 {
		var store storage.Queue = tb.Store
		var pub publisher.Publisher = newFlaky(openNATS(t, srv, ""), uint64(i))
		if i == 0 {
			store = crashStore{Queue: tb.Store, c: victim}
			pub = crashPublisher{Publisher: pub, c: victim}
		}
		start(t, partitionConfig(fmt.Sprintf("relay-%d", i)), store, pub)
	}

	eventually.True(t, 30*time.Second, func() bool { return tb.Counts(t)[outbox.StatusDelivered] > n/5 },
		func() string { return "a fifth delivered" })
	victim.crashed.Store(true)

	waitCounts(t, tb, 2*time.Minute, map[outbox.Status]int{outbox.StatusDelivered: n})
	requireKeyOrder(t, st, n)
}

func TestPartitionOrderKeepsInsertOrderWithinATransaction(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	srv := natstest.Start(t)
	st := srv.Stream(t, jetstream.StreamConfig{Name: "ONETX", Subjects: []string{"onetx.>"}})
	// One transaction: every row shares created_at.
	n := insertKeyed(t, tb, "onetx.event", 3, 200, 1)

	for i := range 2 {
		cfg := partitionConfig(fmt.Sprintf("relay-%d", i))
		cfg.BatchSize = 37 // runs split across batches and relays
		start(t, cfg, tb.Store, openNATS(t, srv, ""))
	}
	waitCounts(t, tb, time.Minute, map[outbox.Status]int{outbox.StatusDelivered: n})
	requireKeyOrder(t, st, n)
}

// failKeyOnce fails the first publish of each event whose key is key.
type failKeyOnce struct {
	publisher.Publisher
	key    string
	mu     sync.Mutex
	failed map[string]bool
}

func (f *failKeyOnce) Publish(ctx context.Context, batch []outbox.Event) []error {
	errs := make([]error, len(batch))
	var pass []outbox.Event
	var passIdx []int
	f.mu.Lock()
	for i, e := range batch {
		if e.PartitionKey == f.key && !f.failed[e.ID.String()] {
			f.failed[e.ID.String()] = true
			errs[i] = errors.New("injected failure for " + f.key)
			continue
		}
		pass = append(pass, e)
		passIdx = append(passIdx, i)
	}
	f.mu.Unlock()
	for j, err := range f.Publisher.Publish(ctx, pass) {
		errs[passIdx[j]] = err
	}
	return errs
}

func TestPartitionBackoffHoldsBackItsKeyOnly(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	srv := natstest.Start(t)
	srv.Stream(t, jetstream.StreamConfig{Name: "BACKOFF", Subjects: []string{"backoff.>"}})
	n := insertKeyed(t, tb, "backoff.event", 5, 20, 4)

	cfg := partitionConfig("relay")
	cfg.Retry = relay.RetryPolicy{MaxAttempts: 10, BaseDelay: time.Hour, MaxDelay: time.Hour}
	pub := &failKeyOnce{Publisher: openNATS(t, srv, ""), key: "key-002", failed: map[string]bool{}}
	start(t, cfg, tb.Store, pub)

	// Every other key drains; key-002's head waits an hour and its other
	// events wait behind it, untouched.
	waitCounts(t, tb, 30*time.Second, map[outbox.Status]int{outbox.StatusDelivered: n - 20, outbox.StatusPending: 20})
	var retrying, untried int
	for _, r := range rowsOfKey(t, tb, "key-002") {
		switch {
		case r.Attempts == 1 && r.AvailableAt.After(time.Now().Add(30*time.Minute)):
			retrying++
		case r.Attempts == 0:
			untried++
		default:
			t.Errorf("key-002 row in unexpected state: %+v", r)
		}
	}
	if retrying != 1 || untried != 19 {
		t.Fatalf("key-002: %d rows backing off and %d untried, want 1 and 19", retrying, untried)
	}
}

func rowsOfKey(t *testing.T, tb *pgtest.Table, key string) []pgtest.Row {
	t.Helper()
	rows, err := tb.Pool().Query(context.Background(),
		"SELECT event_id FROM "+tb.Name+" WHERE partition_key = $1", key)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []pgtest.Row
	for rows.Next() {
		var id [16]byte
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		out = append(out, tb.Get(t, id))
	}
	return out
}

func TestPartitionDeadEventSkipsOrBlocksItsKey(t *testing.T) {
	t.Parallel()
	for _, policy := range []storage.DeadPolicy{storage.DeadSkip, storage.DeadBlock} {
		t.Run(string(policy), func(t *testing.T) {
			t.Parallel()
			tb := pgtest.New(t)
			srv := natstest.Start(t)
			srv.Stream(t, jetstream.StreamConfig{Name: "DEADKEY", Subjects: []string{"deadkey.>"}})
			tb.Insert(t,
				pgtest.Event{Type: "deadkey.e", PartitionKey: "k", Headers: `{"bad":[1]}`}, // dies at once
				pgtest.Event{Type: "deadkey.e", PartitionKey: "k"},
				pgtest.Event{Type: "deadkey.e", PartitionKey: "k"},
				pgtest.Event{Type: "deadkey.e", PartitionKey: "other"},
			)
			cfg := partitionConfig("relay")
			cfg.OnDead = policy
			start(t, cfg, tb.Store, openNATS(t, srv, ""))
			want := map[outbox.Status]int{outbox.StatusDead: 1, outbox.StatusDelivered: 3}
			if policy == storage.DeadBlock {
				want = map[outbox.Status]int{outbox.StatusDead: 1, outbox.StatusDelivered: 1, outbox.StatusPending: 2}
			}
			waitCounts(t, tb, 30*time.Second, want)
		})
	}
}

// TestPartitionOrderHoldsInDeleteMode: with DELIVERED_RETENTION=0 a
// delivered event leaves no row behind, and ordered claims, which look only
// at unfinished rows, still keep every key in order across relays and
// failures.
func TestPartitionOrderHoldsInDeleteMode(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	srv := natstest.Start(t)
	st := srv.Stream(t, jetstream.StreamConfig{Name: "ORDERED", Subjects: []string{"ordered.>"}, Duplicates: 10 * time.Minute})
	n := insertKeyed(t, tb, "ordered.event", 20, 30, 10)
	runReaper(t, tb, 2*time.Second)
	for i := range 2 {
		cfg := partitionConfig(fmt.Sprintf("relay-%d", i))
		cfg.DeleteDelivered = true
		start(t, cfg, tb.Store, newFlaky(openNATS(t, srv, ""), uint64(i)))
	}
	waitCounts(t, tb, 2*time.Minute, map[outbox.Status]int{})
	requireKeyOrder(t, st, n)
}
