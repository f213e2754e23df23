package relay_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/relay/internal/harness/amqptest"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/internal/tcpproxy"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	_ "github.com/outbox-relay/relay/pkg/publisher/amqp" // registers amqp://
	"github.com/outbox-relay/relay/pkg/relay"
)

// amqpDestination declares a private topic exchange and a durable queue
// (with queueArgs) bound to it for bindingKey, both deleted at the end of
// the test.
func amqpDestination(t testing.TB, bindingKey string, queueArgs amqp091.Table) (exchange, queue string) {
	t.Helper()
	ch := amqptest.Channel(t)
	exchange = amqptest.Exchange(t, ch, "topic")
	queue = amqptest.Queue(t, ch, "", queueArgs)
	amqptest.Bind(t, ch, queue, exchange, bindingKey)
	return exchange, queue
}

// openAMQP opens the driver on the exchange, through via (host:port) when
// given, and closes it at the end of the test.
func openAMQP(t testing.TB, via, exchange, query string) publisher.Publisher {
	t.Helper()
	pub, err := publisher.Open(context.Background(), amqptest.DriverURL(via, "exchange="+exchange+query))
	if err != nil {
		t.Fatalf("open amqp publisher: %v", err)
	}
	t.Cleanup(func() { _ = pub.Close(context.Background()) })
	return pub
}

func TestAMQPDeliversEveryEventOnceWithHeaders(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	exchange, queue := amqpDestination(t, "orders.*", nil)

	const n = 1200
	events := make([]pgtest.Event, n)
	for i := range events {
		events[i] = pgtest.Event{
			Type:         "orders.created",
			PartitionKey: fmt.Sprintf("customer-%d", i%7),
			Payload:      pgtest.Payload(i, 200),
			Headers:      fmt.Sprintf(`{"tenant":"acme","seq":%d,"replayed":false,"content-type":"application/json"}`, i),
		}
		if i%10 == 9 {
			events[i].PartitionKey = ""
		}
	}
	ids := tb.Insert(t, events...)

	start(t, relay.Config{BatchSize: 100}, tb.Store, openAMQP(t, "", exchange, ""))
	waitCounts(t, tb, 30*time.Second, map[outbox.Status]int{outbox.StatusDelivered: n})

	ch := amqptest.Channel(t)
	// Every event was confirmed, so every message is in the queue by now.
	if got := amqptest.Queued(t, ch, queue); got != n {
		t.Fatalf("queue holds %d messages, want %d", got, n)
	}
	byID := map[string]int{}
	for i, id := range ids {
		byID[id.String()] = i
	}
	seen := map[string]bool{}
	for _, m := range amqptest.Consume(t, ch, queue, n) {
		i, ok := byID[m.MessageId]
		if !ok {
			t.Fatalf("unknown message_id %q", m.MessageId)
		}
		if seen[m.MessageId] {
			t.Fatalf("event %d arrived twice", i)
		}
		seen[m.MessageId] = true
		e := events[i]
		if m.RoutingKey != "orders.created" || m.Type != "orders.created" || m.DeliveryMode != amqp091.Persistent ||
			m.ContentType != "application/json" || string(m.Body) != string(e.Payload) {
			t.Fatalf("event %d arrived as key %q type %q mode %d content type %q body %q",
				i, m.RoutingKey, m.Type, m.DeliveryMode, m.ContentType, m.Body)
		}
		want := map[string]any{
			outbox.HeaderEventID:   m.MessageId,
			outbox.HeaderEventType: "orders.created",
			"tenant":               "acme",
			"seq":                  fmt.Sprint(i),
			"replayed":             "false",
		}
		if e.PartitionKey != "" {
			want[outbox.HeaderPartitionKey] = e.PartitionKey
		}
		if fmt.Sprint(m.Headers) != fmt.Sprint(amqp091.Table(want)) {
			t.Fatalf("event %d headers %v, want %v", i, m.Headers, want)
		}
	}
}

func TestAMQPUnroutableEventsGoDeadWhileTheRestFlow(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	exchange, queue := amqpDestination(t, "orders.#", nil)

	good := tb.InsertN(t, 200, "orders.created")
	bad := tb.Insert(t,
		pgtest.Event{Type: "payments.created"},
		pgtest.Event{Type: "orders.created", Headers: `{"tags":["a","b"]}`},
		pgtest.Event{Type: "orders.created", Payload: make([]byte, 4096)},
		pgtest.Event{Type: "orders." + strings.Repeat("x", 300)},
	)
	wantErr := []string{`no queue is bound to exchange "` + exchange + `" for routing key "payments.created"`,
		`header "tags"`, "too large", "invalid routing key"}

	start(t, relay.Config{BatchSize: 50, Retry: relay.RetryPolicy{MaxAttempts: 25}}, tb.Store,
		openAMQP(t, "", exchange, "&max_message_size=1024"))
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
	if got := amqptest.Queued(t, amqptest.Channel(t), queue); got != len(good) {
		t.Errorf("queue holds %d messages, want the %d good events", got, len(good))
	}
}

func TestAMQPConnectionCutMidDrainSendsNothingDead(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	exchange, queue := amqpDestination(t, "outage.#", nil)
	proxy := tcpproxy.Start(t, amqptest.Host(t))
	const n = 20000
	ids := tb.InsertN(t, n, "outage.event")

	drainThroughOutage(t, tb, n, openAMQP(t, proxy.Addr(), exchange, "&timeout=2s"), proxy.Down, proxy.Up)
	// Batches cut off by the outage may have reached the queue and be
	// published again: at least once, so every event is there, some maybe
	// twice.
	ch := amqptest.Channel(t)
	queued := amqptest.Queued(t, ch, queue)
	if queued < n {
		t.Fatalf("queue holds %d messages, want at least %d", queued, n)
	}
	seen := map[string]bool{}
	for _, m := range amqptest.Consume(t, ch, queue, queued) {
		seen[m.MessageId] = true
	}
	for i, id := range ids {
		if !seen[id.String()] {
			t.Fatalf("event %d (%s) is DELIVERED but not in the queue", i, id)
		}
	}
	t.Logf("%d messages for %d events after the outage", queued, n)
}
