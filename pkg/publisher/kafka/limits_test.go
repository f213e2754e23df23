package kafka_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/relay/internal/harness/kafkatest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/publishertest"
)

func goodEvents(topic string, n int) []outbox.Event {
	batch := make([]outbox.Event, n)
	for i := range batch {
		batch[i] = event(topic, fmt.Sprintf("k%d", i%7), fmt.Sprintf("good %d", i), `{"tenant":"acme"}`)
	}
	return batch
}

// TestHostileEventAmongManyGoodOnes mixes one event that breaks a limit of
// Kafka into a batch of good ones: the good ones reach the topic once each,
// the hostile one goes DEAD with an error naming the limit, and the
// publisher keeps working.
func TestHostileEventAmongManyGoodOnes(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t, kfake.NumBrokers(1), kfake.BrokerConfigs(map[string]string{"message.max.bytes": "65536"}))
	big := strings.Repeat("v", 70_000)
	cases := []struct {
		name  string
		query string
		bad   func(topic string) outbox.Event
		want  []string
	}{
		{"topic not ASCII", "", func(string) outbox.Event { return event("orders.créé", "k", "{}", "") },
			[]string{`invalid topic "orders.créé"`, "character 'é'"}},
		{"topic of 250 characters", "", func(string) outbox.Event { return event(strings.Repeat("t", 250), "k", "{}", "") },
			[]string{"is 250 characters", "249"}},
		{"headers above batch_bytes", "?batch_bytes=65536", func(topic string) outbox.Event { return event(topic, "k", "{}", `{"big":"`+big+`"}`) },
			[]string{"record too large", "key, value and headers", "batch_bytes=65536"}},
		{"key above the broker's message.max.bytes", "", func(topic string) outbox.Event { return event(topic, big, "{}", "") },
			[]string{"too large for the broker", "message.max.bytes"}},
		{"headers above the broker's message.max.bytes", "", func(topic string) outbox.Event {
			return event(topic, "k", "{}", manyHeaders(700, 100))
		}, []string{"too large for the broker", "message.max.bytes"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			topic := newTopic()
			c.CreateTopic(t, topic, 3, nil)
			pub := open(t, c.URL(tc.query))

			good := goodEvents(topic, 200)
			batch := append(append(append([]outbox.Event{}, good[:100]...), tc.bad(topic)), good[100:]...)
			errs := publishertest.Publish(t, pub, batch...)
			for i, err := range errs {
				if i != 100 && err != nil {
					t.Fatalf("good event %d: %v", i, err)
				}
			}
			err := errs[100]
			if !publisher.IsPermanent(err) || publisher.IsUnavailable(err) {
				t.Fatalf("hostile event: %v, want a permanent error", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}

			next := goodEvents(topic, 20)
			publishertest.RequireDelivered(t, publishertest.Publish(t, pub, next...))
			want := map[string]bool{}
			for _, e := range append(good, next...) {
				want[e.ID.String()] = true
			}
			got := c.AllRecords(t, topic)
			if len(got) != len(want) {
				t.Fatalf("topic holds %d records, want the %d good events once each", len(got), len(want))
			}
			for _, r := range got {
				if !want[kafkatest.Header(r, outbox.HeaderEventID)] {
					t.Fatalf("topic holds a record that is none of the good events")
				}
			}
		})
	}
}

func manyHeaders(n, size int) string {
	var b strings.Builder
	b.WriteString("{")
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"h%d":"%s"`, i, strings.Repeat("v", size))
	}
	b.WriteString("}")
	return b.String()
}
