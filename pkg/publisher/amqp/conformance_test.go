package amqp

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/relay/internal/harness/amqptest"
	"github.com/outbox-relay/relay/internal/tcpproxy"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/publishertest"
)

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
	admin := amqptest.Channel(t)
	return &rabbitBroker{
		proxy:    tcpproxy.Start(t, amqptest.Host(t)),
		exchange: amqptest.Exchange(t, admin, "topic"),
		admin:    admin,
	}
}

func (b *rabbitBroker) Open(t *testing.T) publisher.Publisher {
	// A small max_message_size makes "too large" testable without
	// changing the server's setting that other tests share.
	return openPublisher(t, amqptest.DriverURL(b.proxy.Addr(), "exchange="+b.exchange+"&timeout=2s&max_message_size=65536"))
}

func (b *rabbitBroker) Destination(t *testing.T) string {
	typ := "dest." + strings.ReplaceAll(uuid.NewString(), "-", "")
	amqptest.BoundQueue(t, b.admin, b.exchange, typ)
	return typ
}

func (b *rabbitBroker) Received(t *testing.T, eventType string, want int) []publishertest.Message {
	var out []publishertest.Message
	for _, d := range amqptest.Drain(t, eventType, want) {
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

// Drop cuts the driver's connections as RabbitMQ does when it closes one
// (FRAME_ERROR, a forced close): the proxy is the only way to act on the
// driver's connection without changing the shared server.
func (b *rabbitBroker) Drop(*testing.T) {
	b.proxy.Down()
	b.proxy.Up()
}

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
			{Name: "headers over the frame size", Event: outbox.Event{Headers: []byte(`{"big":"` + strings.Repeat("v", 140000) + `"}`)}, WantErr: "frame_max"},
			{Name: "partition key over the frame size", Event: outbox.Event{PartitionKey: strings.Repeat("k", 140000)}, WantErr: "frame_max"},
		},
	})
}

// Helpers shared by this package's tests.

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
