package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	pubnats "github.com/outbox-relay/relay/pkg/publisher/nats"
	"github.com/outbox-relay/relay/pkg/publisher/nats/natstest"
	"github.com/outbox-relay/relay/pkg/relay"
	"github.com/outbox-relay/relay/pkg/storage/postgres/pgtest"
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
	engine *relay.Engine
	cancel context.CancelFunc
	done   chan error
}

func start(t *testing.T, cfg relay.Config, store relay.Store, pub publisher.Publisher) *running {
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
	r := &running{engine: e, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- e.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop ends the engine and waits for Run to return.
func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok && err != nil {
			t.Errorf("Run returned %v", err)
		}
		close(r.done)
	case <-time.After(time.Minute):
		t.Fatal("engine did not stop within a minute")
	}
}

func waitCounts(t *testing.T, tb *pgtest.Table, timeout time.Duration, want map[outbox.Status]int) {
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
	_ = sync.Mutex{}
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
