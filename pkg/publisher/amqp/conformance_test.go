package amqp

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/tcpproxy"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/publishertest"
)

// brokerURL is the RabbitMQ the tests use: TEST_AMQP_URL, or the local one
// `make test` starts.
func brokerURL() string {
	if u := os.Getenv("TEST_AMQP_URL"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672"
}

// rabbitBroker is a private exchange on the shared RabbitMQ, reached by the
// driver through a proxy that Stop and Start cut and restore; the test's
// own connection goes direct, so it can still read during an outage.
type rabbitBroker struct {
	proxy    *tcpproxy.Proxy
	exchange string
	admin    *amqp091.Channel
}

func newRabbitBroker(t *testing.T) *rabbitBroker {
	t.Helper()
	b := &rabbitBroker{
		proxy:    tcpproxy.Start(t, brokerHost(t)),
		exchange: "test-" + uuid.NewString(),
		admin:    adminChannel(t),
	}
	if err := b.admin.ExchangeDeclare(b.exchange, "topic", true, false, false, false, nil); err != nil {
		t.Fatalf("declare exchange: %v", err)
	}
	t.Cleanup(func() { deleteExchange(t, b.exchange) })
	return b
}

func (b *rabbitBroker) Open(t *testing.T) publisher.Publisher {
	// A small max_message_size makes "too large" testable without
	// changing the server's setting that other tests share.
	return openPublisher(t, fmt.Sprintf("amqp://guest:guest@%s?exchange=%s&timeout=2s&max_message_size=65536",
		b.proxy.Addr(), b.exchange))
}

func (b *rabbitBroker) Destination(t *testing.T) string {
	typ := "dest." + strings.ReplaceAll(uuid.NewString(), "-", "")
	boundQueue(t, b.admin, b.exchange, typ)
	return typ
}

func (b *rabbitBroker) Received(t *testing.T, eventType string, want int) []publishertest.Message {
	var out []publishertest.Message
	for _, d := range drain(t, eventType, want) {
		h := map[string]string{}
		for k, v := range d.Headers {
			h[k] = fmt.Sprint(v)
		}
		out = append(out, publishertest.Message{
			ID: d.MessageId, Type: d.RoutingKey, Key: h[outbox.HeaderPartitionKey], Payload: d.Body, Headers: h,
		})
	}
	return out
}

func (b *rabbitBroker) Stop(*testing.T)  { b.proxy.Down() }
func (b *rabbitBroker) Start(*testing.T) { b.proxy.Up() }

func TestConformance(t *testing.T) {
	t.Parallel()
	publishertest.Run(t, publishertest.Driver{
		NewBroker:     func(t *testing.T) publishertest.Broker { return newRabbitBroker(t) },
		HeaderEventID: true,
		Permanent: []publishertest.PermanentCase{
			{Name: "no queue bound", Event: outbox.Event{Type: "unbound." + uuid.NewString()}, KeepType: true, WantErr: "no queue is bound"},
			{Name: "routing key too long", Event: outbox.Event{Type: strings.Repeat("k", 256)}, KeepType: true, WantErr: "invalid routing key"},
			{Name: "empty routing key", Event: outbox.Event{Type: ""}, KeepType: true, WantErr: "invalid routing key"},
			{Name: "too large", Event: outbox.Event{Payload: make([]byte, 100*1024)}, WantErr: "too large"},
			{Name: "headers not an object", Event: outbox.Event{Headers: []byte(`["x"]`)}, WantErr: "headers must be a JSON object"},
			{Name: "header holds an object", Event: outbox.Event{Headers: []byte(`{"meta":{"a":1}}`)}, WantErr: `header "meta"`},
			{Name: "CC header", Event: outbox.Event{Headers: []byte(`{"CC":"ops@example.com"}`)}, WantErr: `header "CC"`},
			{Name: "header name too long", Event: outbox.Event{Headers: []byte(`{"` + strings.Repeat("h", 256) + `":"v"}`)}, WantErr: "at most 255"},
		},
	})
}

// Helpers shared by this package's tests.

func brokerHost(t testing.TB) string {
	t.Helper()
	uri, err := amqp091.ParseURI(brokerURL())
	if err != nil {
		t.Fatalf("TEST_AMQP_URL: %v", err)
	}
	return fmt.Sprintf("%s:%d", uri.Host, uri.Port)
}

// adminChannel is a direct connection for setting up and reading back,
// closed at the end of the test.
func adminChannel(t testing.TB) *amqp091.Channel {
	t.Helper()
	conn, err := amqp091.Dial(brokerURL())
	if err != nil {
		t.Fatalf("connect to RabbitMQ at %s: %v (is it running? `make test` starts it)", brokerHost(t), err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("open channel: %v", err)
	}
	return ch
}

// boundQueue declares a durable queue bound to exchange for key, deleted at
// the end of the test, and returns its name.
func boundQueue(t testing.TB, ch *amqp091.Channel, exchange, key string) string {
	t.Helper()
	q, err := ch.QueueDeclare(key, true, false, false, false, nil)
	if err != nil {
		t.Fatalf("declare queue %s: %v", key, err)
	}
	if err := ch.QueueBind(q.Name, key, exchange, false, nil); err != nil {
		t.Fatalf("bind queue %s: %v", key, err)
	}
	t.Cleanup(func() { deleteQueue(t, q.Name) })
	return q.Name
}

// deleteExchange and deleteQueue use a connection of their own: the test's
// channel may have been closed by an error the test provoked.
func deleteExchange(t testing.TB, name string) {
	withCleanupChannel(t, func(ch *amqp091.Channel) error { return ch.ExchangeDelete(name, false, false) })
}

func deleteQueue(t testing.TB, name string) {
	withCleanupChannel(t, func(ch *amqp091.Channel) error { _, err := ch.QueueDelete(name, false, false, false); return err })
}

func withCleanupChannel(t testing.TB, fn func(*amqp091.Channel) error) {
	conn, err := amqp091.Dial(brokerURL())
	if err != nil {
		t.Errorf("cleanup: connect: %v", err)
		return
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err == nil {
		err = fn(ch)
	}
	if err != nil {
		t.Errorf("cleanup: %v", err)
	}
}

// drain reads queue until it is empty with at least want messages read, or
// a deadline passes, and returns them in queue order.
func drain(t testing.TB, queue string, want int) []amqp091.Delivery {
	t.Helper()
	ch := adminChannel(t)
	var got []amqp091.Delivery
	eventually.True(t, 30*time.Second, func() bool {
		for {
			d, ok, err := ch.Get(queue, true)
			if err != nil {
				t.Fatalf("get from %s: %v", queue, err)
			}
			if !ok {
				return len(got) >= want
			}
			got = append(got, d)
		}
	}, func() string { return fmt.Sprintf("%d messages in %s, have %d", want, queue, len(got)) })
	return got
}

// openPublisher opens the driver through publisher.Open and closes it at
// the end of the test.
func openPublisher(t testing.TB, rawURL string) publisher.Publisher {
	t.Helper()
	p, err := publisher.Open(context.Background(), rawURL)
	if err != nil {
		t.Fatalf("publisher.Open: %v", err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}
