package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/natstest"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	pubnats "github.com/outbox-relay/relay/pkg/publisher/nats"
	"github.com/outbox-relay/relay/pkg/reaper"
	"github.com/outbox-relay/relay/pkg/relay"
	"github.com/outbox-relay/relay/pkg/storage"
)

// testLogger shows engine logs with -v when RELAY_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("RELAY_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

// openNATS connects the NATS driver to srv.
func openNATS(t *testing.T, srv *natstest.Server, query string) publisher.Publisher {
	t.Helper()
	pub, err := publisher.Open(context.Background(), srv.URL()+query)
	if err != nil {
		t.Fatalf("open nats publisher: %v", err)
	}
	t.Cleanup(func() { _ = pub.Close(context.Background()) })
	return pub
}

var _ = pubnats.TimeoutDefault // registers the nats:// driver

// running is an engine running in the background until stop is called.
type running struct {
	engine  *relay.Engine
	cancel  context.CancelFunc
	done    chan struct{}
	stopped sync.Once
}

func start(t *testing.T, cfg relay.Config, store storage.Queue, pub publisher.Publisher) *running {
	t.Helper()
	if cfg.RelayID == "" {
		cfg.RelayID = "test-relay"
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 50 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	e, err := relay.New(cfg, store, pub)
	if err != nil {
		t.Fatalf("relay.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{engine: e, cancel: cancel, done: make(chan struct{})}
	go func() { e.Run(ctx); close(r.done) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop ends the engine and waits for Run to return.
func (r *running) stop(t *testing.T) {
	t.Helper()
	r.stopped.Do(func() {
		r.cancel()
		select {
		case <-r.done:
		case <-time.After(time.Minute):
			t.Fatal("engine did not stop within a minute")
		}
	})
}

// counter is a test table of any storage that counts its rows by status.
type counter interface {
	Counts(t testing.TB) map[outbox.Status]int
}

func waitCounts(t *testing.T, tb counter, timeout time.Duration, want map[outbox.Status]int) {
	t.Helper()
	var got map[outbox.Status]int
	eventually.True(t, timeout, func() bool {
		got = tb.Counts(t)
		return fmt.Sprint(got) == fmt.Sprint(want)
	}, func() string { return fmt.Sprintf("status counts %v, want %v", got, want) })
}

func TestDeliversEveryEventOnceWithHeaders(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	srv := natstest.Start(t)
	st := srv.Stream(t, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})

	const n = 1200
	events := make([]pgtest.Event, n)
	for i := range events {
		events[i] = pgtest.Event{
			Type:         "orders.created",
			PartitionKey: fmt.Sprintf("customer-%d", i%7),
			Payload:      pgtest.Payload(i, 200),
			Headers:      fmt.Sprintf(`{"tenant":"acme","seq":%d,"replayed":false}`, i),
		}
	}
	ids := tb.Insert(t, events...)

	start(t, relay.Config{BatchSize: 100}, tb.Store, openNATS(t, srv, ""))
	waitCounts(t, tb, 30*time.Second, map[outbox.Status]int{outbox.StatusDelivered: n})

	msgs := natstest.Messages(t, st)
	if len(msgs) != n {
		t.Fatalf("stream holds %d messages, want %d", len(msgs), n)
	}
	seen := map[string]bool{}
	byID := map[uuid.UUID]int{}
	for i, id := range ids {
		byID[id] = i
	}
	for _, m := range msgs {
		id := m.Header.Get("Nats-Msg-Id")
		if seen[id] {
			t.Fatalf("event %s is in the stream twice", id)
		}
		seen[id] = true
		i, ok := byID[uuid.MustParse(id)]
		if !ok {
			t.Fatalf("unknown Nats-Msg-Id %q", id)
		}
		checks := map[string]string{
			outbox.HeaderEventID:      id,
			outbox.HeaderEventType:    "orders.created",
			outbox.HeaderPartitionKey: events[i].PartitionKey,
			"tenant":                  "acme",
			"seq":                     fmt.Sprint(i),
			"replayed":                "false",
		}
		for k, want := range checks {
			if got := m.Header.Get(k); got != want {
				t.Fatalf("event %d header %s = %q, want %q", i, k, got, want)
			}
		}
		if string(m.Data) != string(events[i].Payload) {
			t.Fatalf("event %d payload = %q, want %q", i, m.Data, events[i].Payload)
		}
		if m.Subject != "orders.created" {
			t.Fatalf("subject = %q", m.Subject)
		}
	}
}

func connectJS(t testing.TB, url string) (*natsgo.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := natsgo.Connect(url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

func TestKeepsPartitionKeyOrderWithinABatch(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	srv := natstest.Start(t)
	st := srv.Stream(t, jetstream.StreamConfig{Name: "ORDERED", Subjects: []string{"ordered.>"}})

	const n = 300
	events := make([]pgtest.Event, n)
	for i := range events {
		events[i] = pgtest.Event{Type: "ordered.e", PartitionKey: fmt.Sprintf("k%d", i%5), Payload: []byte(fmt.Sprint(i))}
	}
	// One transaction: every row shares created_at, so only insertion order
	// can tell them apart.
	ids := tb.Insert(t, events...)

	start(t, relay.Config{BatchSize: n, MaxInFlightBatches: 1}, tb.Store, openNATS(t, srv, ""))
	waitCounts(t, tb, 30*time.Second, map[outbox.Status]int{outbox.StatusDelivered: n})

	pos := map[string]int{}
	for i, id := range ids {
		pos[id.String()] = i
	}
	last := map[string]int{}
	msgs := natstest.Messages(t, st)
	if len(msgs) != n {
		t.Fatalf("stream holds %d messages, want %d", len(msgs), n)
	}
	for _, m := range msgs {
		key := m.Header.Get(outbox.HeaderPartitionKey)
		i, ok := pos[m.Header.Get("Nats-Msg-Id")]
		if !ok {
			t.Fatalf("message %q is none of the events written", m.Header.Get("Nats-Msg-Id"))
		}
		if prev, ok := last[key]; ok && i < prev {
			t.Fatalf("key %s: event %d reached the stream after event %d", key, i, prev)
		}
		last[key] = i
	}
}

func TestPermanentErrorsGoDeadAtOnceWhileTheRestFlow(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	srv := natstest.Start(t)
	srv.Stream(t, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, MaxMsgSize: 1024})

	good := tb.InsertN(t, 200, "orders.created")
	bad := tb.Insert(t,
		pgtest.Event{Type: "nostream.created"},
		pgtest.Event{Type: "orders.created", Headers: `{"tags":["a","b"]}`},
		pgtest.Event{Type: "orders.created", Payload: make([]byte, 4096)},
		pgtest.Event{Type: "orders..created"},
		pgtest.Event{Type: "made.empty.below"},
	)
	tb.Exec(t, "UPDATE {{table}} SET event_type = '' WHERE event_id = $1", bad[4])
	wantErr := []string{"no JetStream stream captures subject", `header "tags"`, "too large", "invalid subject", "event_type is empty"}

	start(t, relay.Config{BatchSize: 50, Retry: relay.RetryPolicy{MaxAttempts: 25}}, tb.Store, openNATS(t, srv, ""))
	waitCounts(t, tb, 30*time.Second, map[outbox.Status]int{outbox.StatusDelivered: len(good), outbox.StatusDead: len(bad)})

	for i, id := range bad {
		row := tb.Get(t, id)
		if row.Attempts != 1 {
			t.Errorf("dead event %d has %d attempts, want 1 (permanent errors are not retried)", i, row.Attempts)
		}
		if !strings.Contains(row.LastError, wantErr[i]) {
			t.Errorf("dead event %d last_error = %q, want it to mention %q", i, row.LastError, wantErr[i])
		}
	}
}

func TestRetryableErrorsBackOffThenGoDead(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	srv := natstest.Start(t)
	// A full stream that discards new messages rejects every publish with
	// a retryable error.
	srv.Stream(t, jetstream.StreamConfig{Name: "FULL", Subjects: []string{"full.>"}, MaxMsgs: 1, Discard: jetstream.DiscardNew})
	_, js := srv.Connect(t)
	if _, err := js.Publish(context.Background(), "full.filler", []byte("x")); err != nil {
		t.Fatal(err)
	}
	ids := tb.InsertN(t, 20, "full.event")

	const maxAttempts = 3
	start(t, relay.Config{Retry: relay.RetryPolicy{
		MaxAttempts: maxAttempts, BaseDelay: time.Second, MaxDelay: time.Second, Jitter: 0.1,
	}}, tb.Store, openNATS(t, srv, ""))

	// A failed attempt schedules the next one a backoff later: 1 s (the
	// base, and the cap) ± 10 %, counted from the failure's settle, which
	// stamps updated_at in the same statement.
	var gap float64
	eventually.True(t, 10*time.Second, func() bool {
		return tb.Pool().QueryRow(context.Background(),
			"SELECT extract(epoch FROM available_at - updated_at) FROM "+tb.Name+
				" WHERE status = 'PENDING' AND attempts > 0 LIMIT 1").Scan(&gap) == nil
	}, func() string { return "an event waiting after a failed attempt" })
	if gap < 0.85 || gap > 1.15 {
		t.Errorf("a failed event waits %.3f s before its next attempt, want 1 s ± 10 %%", gap)
	}
	waitCounts(t, tb, 30*time.Second, map[outbox.Status]int{outbox.StatusDead: len(ids)})
	for _, id := range ids {
		row := tb.Get(t, id)
		if row.Attempts != maxAttempts {
			t.Fatalf("event died after %d attempts, want %d", row.Attempts, maxAttempts)
		}
		if !strings.Contains(row.LastError, "maximum messages") {
			t.Fatalf("last_error = %q, want the stream's rejection", row.LastError)
		}
	}
}

func TestRetryPolicyDelay(t *testing.T) {
	p := relay.RetryPolicy{BaseDelay: time.Second, MaxDelay: time.Minute, Jitter: 0.15}
	cases := []struct {
		attempts int
		r        float64
		want     time.Duration
	}{
		{1, 0.5, time.Second},
		{2, 0.5, 2 * time.Second},
		{5, 0.5, 16 * time.Second},
		{7, 0.5, time.Minute},            // 64 s capped
		{6, 1, 36800 * time.Millisecond}, // 32 s + 15 % jitter is under the cap
		{7, 1, time.Minute},              // jitter never lifts a wait over the cap
		{1000, 0.5, time.Minute},
		{1, 0, 850 * time.Millisecond},
		{1, 1, 1150 * time.Millisecond},
		{0, 0.5, time.Second},
	}
	for _, c := range cases {
		got := p.Delay(c.attempts, c.r)
		if diff := got - c.want; diff < -time.Millisecond || diff > time.Millisecond {
			t.Errorf("Delay(%d, %g) = %s, want %s", c.attempts, c.r, got, c.want)
		}
	}
}

func TestTwoEnginesShareATable(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	srv := natstest.Start(t)
	st := srv.Stream(t, jetstream.StreamConfig{Name: "SHARED", Subjects: []string{"shared.>"}})
	const n = 5000
	tb.InsertN(t, n, "shared.event")

	counting := func(id string, mode relay.LeaseMode) (*countingPublisher, *running) {
		cp := &countingPublisher{Publisher: openNATS(t, srv, "")}
		return cp, start(t, relay.Config{RelayID: id, BatchSize: 100, LeaseMode: mode}, tb.Store, cp)
	}
	// One holds its claims, the other leases them: relays of both kinds
	// share a table during a rolling upgrade.
	a, _ := counting("relay-a", relay.LeaseLock)
	b, _ := counting("relay-b", relay.LeaseStatus)
	waitCounts(t, tb, time.Minute, map[outbox.Status]int{outbox.StatusDelivered: n})

	if got := natstest.Count(t, st); got != n {
		t.Fatalf("stream holds %d messages, want %d", got, n)
	}
	if a.acked.Load() == 0 || b.acked.Load() == 0 {
		t.Errorf("one relay did all the work: a=%d b=%d", a.acked.Load(), b.acked.Load())
	}
	if sum := a.acked.Load() + b.acked.Load(); sum != n {
		t.Errorf("relays published %d events in all, want exactly %d (no event claimed twice)", sum, n)
	}
}

// countingPublisher counts the events a real publisher acknowledged.
type countingPublisher struct {
	publisher.Publisher
	acked atomic.Int64
}

func (c *countingPublisher) Publish(ctx context.Context, batch []outbox.Event) []error {
	errs := c.Publisher.Publish(ctx, batch)
	for _, err := range errs {
		if err == nil {
			c.acked.Add(1)
		}
	}
	return errs
}

func TestBrokerOutageSendsNothingDead(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	srv := natstest.Start(t)
	st := srv.Stream(t, jetstream.StreamConfig{Name: "OUTAGE", Subjects: []string{"outage.>"}})
	const n = 20000
	tb.InsertN(t, n, "outage.event")

	drainThroughOutage(t, tb, n, openNATS(t, srv, "?timeout=1s"), srv.Stop, srv.Restart)
	// Batches cut off by the outage may be published again; Msg-Id
	// deduplication keeps one copy of each.
	if got := natstest.Count(t, st); got != n {
		t.Errorf("stream holds %d messages, want %d", got, n)
	}
}

// drainThroughOutage drains a backlog of n events through pub, cuts the
// broker off with down once the first are delivered, waits until the
// engine pauses, restores the broker with up, and requires every event
// DELIVERED with no attempt counted for the outage. Two attempts would
// kill any event the outage were counted against. The caller checks what
// reached the broker.
func drainThroughOutage(t *testing.T, tb *pgtest.Table, n int, pub publisher.Publisher, down, up func()) {
	t.Helper()
	r := start(t, relay.Config{BatchSize: 100, MaxInFlightBatches: 2, Retry: relay.RetryPolicy{MaxAttempts: 2}}, tb.Store, pub)

	eventually.True(t, 30*time.Second, func() bool { return tb.Counts(t)[outbox.StatusDelivered] > 0 },
		func() string { return "first deliveries" })
	down()
	eventually.True(t, 30*time.Second, func() bool { return r.engine.State() == relay.StatePaused },
		func() string { return fmt.Sprintf("engine paused, state %s", r.engine.State()) })
	if c := tb.Counts(t); c[outbox.StatusDelivered] == n {
		t.Fatal("the backlog drained before the outage; raise n")
	}
	up()

	waitCounts(t, tb, 2*time.Minute, map[outbox.Status]int{outbox.StatusDelivered: n})
	if r.engine.State() != relay.StateActive {
		t.Errorf("state after recovery = %s, want active", r.engine.State())
	}
	if burned := tb.Exec(t, "SELECT 1 FROM {{table}} WHERE attempts > 0"); burned != 0 {
		t.Errorf("%d events had an attempt counted for the outage", burned)
	}
}

func TestShutdownLeavesNothingDelivering(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	srv := natstest.Start(t)
	srv.Stream(t, jetstream.StreamConfig{Name: "STOP", Subjects: []string{"stop.>"}})
	const n = 30000
	tb.InsertN(t, n, "stop.event")

	r := start(t, relay.Config{BatchSize: 200}, tb.Store, openNATS(t, srv, ""))
	eventually.True(t, 30*time.Second, func() bool { return tb.Counts(t)[outbox.StatusDelivered] > 0 },
		func() string { return "first deliveries" })
	r.stop(t)

	c := tb.Counts(t)
	if c[outbox.StatusDelivering] != 0 {
		t.Fatalf("%d rows left DELIVERING after shutdown: %v", c[outbox.StatusDelivering], c)
	}
	if c[outbox.StatusPending] == 0 {
		t.Fatal("the backlog drained before the shutdown; raise n")
	}
	if c[outbox.StatusDead] != 0 {
		t.Fatalf("shutdown killed events: %v", c)
	}
}

func TestShutdownReleasesBatchesTheBrokerNeverAcknowledges(t *testing.T) {
	t.Parallel()
	forEachLeaseMode(t, func(t *testing.T, mode relay.LeaseMode) {
		tb := pgtest.New(t)
		srv := natstest.Start(t)
		// A plain subscriber and no stream: publishes find a responder that
		// never acknowledges, so the batch hangs until shutdown cuts it off.
		nc, _ := srv.Connect(t)
		if _, err := nc.SubscribeSync("hang.>"); err != nil {
			t.Fatal(err)
		}
		ids := tb.InsertN(t, 50, "hang.event")

		// A quarter of it is left for handing the batch back.
		r := start(t, relay.Config{ShutdownTimeout: time.Second, LeaseMode: mode}, tb.Store, openNATS(t, srv, "?timeout=1m"))
		eventually.True(t, 10*time.Second, func() bool { return inFlight(t, tb, mode) == len(ids) },
			func() string { return "the batch in flight" })
		began := time.Now()
		r.stop(t)
		if took := time.Since(began); took > 10*time.Second {
			t.Errorf("shutdown took %s with a 1s SHUTDOWN_TIMEOUT", took)
		}
		for _, id := range ids {
			row := tb.Get(t, id)
			if row.Status != outbox.StatusPending || row.Attempts != 0 {
				t.Fatalf("unacknowledged event after shutdown: %+v, want PENDING with 0 attempts", row)
			}
		}
		if held := tb.Held(t); held != 0 {
			t.Errorf("%d rows still held after shutdown", held)
		}
	})
}

// forEachLeaseMode runs test once per LEASE_MODE, in parallel.
func forEachLeaseMode(t *testing.T, test func(t *testing.T, mode relay.LeaseMode)) {
	for _, mode := range []relay.LeaseMode{relay.LeaseLock, relay.LeaseStatus} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			test(t, mode)
		})
	}
}

// inFlight counts the events claimed and not yet settled: DELIVERING under
// a lease, or PENDING and locked under a held claim.
func inFlight(t testing.TB, tb *pgtest.Table, mode relay.LeaseMode) int {
	if mode == relay.LeaseStatus {
		return tb.Counts(t)[outbox.StatusDelivering]
	}
	return tb.Held(t)
}

func TestReaperHandsAbandonedLeasesToALiveRelay(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	srv := natstest.Start(t)
	st := srv.Stream(t, jetstream.StreamConfig{Name: "REAPED", Subjects: []string{"reaped.>"}})
	const n = 300
	tb.InsertN(t, n, "reaped.event")

	// A relay claims everything and dies without a word.
	if _, err := tb.Store.Claim(context.Background(), storage.ClaimParams{RelayID: "crashed", Limit: n}); err != nil {
		t.Fatal(err)
	}
	tb.Exec(t, "UPDATE {{table}} SET locked_at = now() - interval '10 minutes'")

	start(t, relay.Config{RelayID: "survivor"}, tb.Store, openNATS(t, srv, ""))
	rp, err := reaper.New(reaper.Config{Interval: 50 * time.Millisecond, LeaseTimeout: time.Minute, BatchSize: 100, MaxAttempts: 25}, tb.Store)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	reaped := make(chan struct{})
	go func() { rp.Run(ctx); close(reaped) }()
	defer func() { cancel(); <-reaped }()

	waitCounts(t, tb, 30*time.Second, map[outbox.Status]int{outbox.StatusDelivered: n})
	if got := natstest.Count(t, st); got != n {
		t.Errorf("stream holds %d messages, want %d", got, n)
	}
	if wrong := tb.Exec(t, "SELECT 1 FROM {{table}} WHERE attempts <> 1 OR last_error <> 'lease expired (relay crashed)'"); wrong != 0 {
		t.Errorf("%d delivered rows do not record the expired lease as one attempt", wrong)
	}
}

// DELIVERED_RETENTION=0: delivered events leave no row behind, and the
// rest settle as usual; the observer still counts every delivery.
func TestDeleteDeliveredLeavesNoDeliveredRows(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	srv := natstest.Start(t)
	srv.Stream(t, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})

	good := tb.InsertN(t, 300, "orders.created")
	tb.Insert(t, pgtest.Event{Type: "nostream.created"})
	obs := &deliveryCounter{}
	start(t, relay.Config{BatchSize: 50, DeleteDelivered: true, Observer: obs}, tb.Store, openNATS(t, srv, ""))
	waitCounts(t, tb, 30*time.Second, map[outbox.Status]int{outbox.StatusDead: 1})
	eventually.True(t, 10*time.Second, func() bool { return obs.delivered.Load() == int64(len(good)) },
		func() string {
			return fmt.Sprintf("the observer counted %d deliveries, want %d", obs.delivered.Load(), len(good))
		})
	if n := obs.markOps.Load(); n != 0 {
		t.Errorf("%d mark_delivered statements in delete mode", n)
	}
	nc, js := connectJS(t, srv.URL())
	defer nc.Close()
	st, err := js.Stream(context.Background(), "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := st.Info(context.Background()); err != nil || info.State.Msgs != uint64(len(good)) {
		t.Fatalf("stream holds %v messages (%v), want %d", info.State.Msgs, err, len(good))
	}
}

// deliveryCounter is an Observer that counts delivered events and the
// settle operations it is told of.
type deliveryCounter struct {
	relay.NopObserver
	delivered atomic.Int64
	markOps   atomic.Int64
}

func (d *deliveryCounter) Finished(_ context.Context, o relay.Outcome) {
	d.delivered.Add(int64(o.Delivered))
}

func (d *deliveryCounter) StartSettle(ctx context.Context, op string, _ int) (context.Context, func(error)) {
	if op == relay.OpMarkDelivered {
		d.markOps.Add(1)
	}
	return ctx, func(error) {}
}
