package kafka_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/relay/internal/harness/kafkatest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/publishertest"
)

// kafkaBroker gives each subtest a three-broker kfake cluster of its own.
// Stop closes the cluster, which cuts every connection and leaves the ports
// refusing; Start opens it again on the same ports with the same data.
type kafkaBroker struct{ c *kafkatest.Cluster }

func (b *kafkaBroker) Open(t *testing.T) publisher.Publisher {
	p, err := publisher.Open(context.Background(), b.c.URL("?timeout=2s"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

func (b *kafkaBroker) Destination(t *testing.T) string {
	topic := newTopic()
	b.c.CreateTopic(t, topic, 3, nil)
	return topic
}

func (b *kafkaBroker) Received(t *testing.T, eventType string, want int) []publishertest.Message {
	var out []publishertest.Message
	for _, r := range b.c.Records(t, eventType, want) {
		out = append(out, publishertest.Message{
			ID: kafkatest.Header(r, outbox.HeaderEventID), Type: r.Topic, Key: string(r.Key),
			Payload: r.Value, Headers: kafkatest.Headers(r),
		})
	}
	return out
}

func (b *kafkaBroker) Stop(*testing.T)    { b.c.Stop() }
func (b *kafkaBroker) Start(t *testing.T) { b.c.Start(t) }

// Drop restarts the cluster at once: kfake cannot close one client's
// connections, and a restart closes every one of them.
func (b *kafkaBroker) Drop(t *testing.T) {
	b.c.Stop()
	b.c.Start(t)
}

func TestConformance(t *testing.T) {
	t.Parallel()
	publishertest.Run(t, publishertest.Driver{
		NewBroker: func(t *testing.T) publishertest.Broker {
			return &kafkaBroker{c: kafkatest.Start(t, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "65536"}))}
		},
		HeaderEventID: true,
		Permanent: []publishertest.PermanentCase{
			{Name: "no such topic", Event: outbox.Event{Type: "nowhere-" + uuid.NewString()}, KeepType: true, WantErr: "does not exist"},
			{Name: "too large for the broker", Event: outbox.Event{Payload: make([]byte, 100*1024)}, WantErr: "too large"},
			{Name: "too large for batch_bytes", Event: outbox.Event{Payload: make([]byte, 2<<20)}, WantErr: "too large"},
			{Name: "invalid topic", Event: outbox.Event{Type: "orders/created"}, KeepType: true, WantErr: "invalid topic"},
			{Name: "topic name too long", Event: outbox.Event{Type: strings.Repeat("t", 250)}, KeepType: true, WantErr: "invalid topic"},
			{Name: "topic not ASCII", Event: outbox.Event{Type: "orders.créé"}, KeepType: true, WantErr: "character 'é'"},
			{Name: "headers too large for the broker", Event: outbox.Event{Headers: []byte(`{"big":"` + strings.Repeat("v", 70000) + `"}`)}, WantErr: "message.max.bytes"},
			{Name: "headers not an object", Event: outbox.Event{Headers: []byte(`["x"]`)}, WantErr: "headers must be a JSON object"},
			{Name: "header holds an object", Event: outbox.Event{Headers: []byte(`{"meta":{"a":1}}`)}, WantErr: `header "meta"`},
		},
	})
}
