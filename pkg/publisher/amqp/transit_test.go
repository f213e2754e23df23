package amqp

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/relay/internal/harness/amqptest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/publishertest"
)

// TestValuesArriveAsWritten checks with the real RabbitMQ what the
// conformance suite cannot: event types that are odd routing keys, and
// header names RabbitMQ might treat specially. AMQP short and long strings
// are length-prefixed bytes, so every one of them must arrive exactly as
// written, in a classic queue and in a quorum queue alike.
func TestValuesArriveAsWritten(t *testing.T) {
	t.Parallel()
	ch := amqptest.Channel(t)
	exchange := amqptest.Exchange(t, ch, "direct")
	queues := []string{amqptest.Queue(t, ch, "", nil), amqptest.Queue(t, ch, "", amqp091.Table{"x-queue-type": "quorum"})}
	types := []string{"plain", "  spaced type  ", "line1\r\nline2", "nul\x00", "a#b*c", " ", "Grüße"}
	for _, typ := range types {
		for _, q := range queues {
			amqptest.Bind(t, ch, q, exchange, typ)
		}
	}
	headers := map[string]string{"Tenant": "a", "tenant": "b", " spaced name ": "c", "a\r\nb": "d", "é": "e", "": "f",
		"x-death": "g", "x-first-death-reason": "h", "X-Delivery-Count": "i"}
	for i, v := range publishertest.HostileValues {
		if utf8.ValidString(v) {
			headers[fmt.Sprintf("v%d", i)] = v
		}
	}
	raw, err := json.Marshal(headers)
	if err != nil {
		t.Fatal(err)
	}
	var batch []outbox.Event
	for _, typ := range types {
		batch = append(batch, newEvent(typ, "  key\r\n\xff\xfe", "{}", string(raw)))
	}
	p := openPublisher(t, amqptest.DriverURL("", "exchange="+exchange))
	publishertest.RequireDelivered(t, publishertest.Publish(t, p, batch...))

	for _, q := range queues {
		got := amqptest.Drain(t, q, len(batch))
		if len(got) != len(batch) {
			t.Fatalf("queue %s holds %d messages, want %d", q, len(got), len(batch))
		}
		for i, d := range got {
			e := batch[i]
			if d.RoutingKey != e.Type || d.Type != e.Type || d.Headers[outbox.HeaderEventType] != e.Type {
				t.Errorf("event type %q arrived as routing key %q, type %q, %s %q", e.Type, d.RoutingKey, d.Type, outbox.HeaderEventType, d.Headers[outbox.HeaderEventType])
			}
			if k := d.Headers[outbox.HeaderPartitionKey]; k != e.PartitionKey {
				t.Errorf("partition key %q arrived as %#v", e.PartitionKey, k)
			}
			for k, v := range headers {
				if got, ok := d.Headers[k]; !ok || got != v {
					t.Errorf("queue %s: header %q = %q arrived as %#v", q, k, v, got)
				}
			}
		}
	}
}

// TestHeadersRabbitMQReplacesGoDead: two row headers for the one
// content_type property go DEAD, and so does x-delivery-count: quorum queues set x-delivery-count
// on every message they deliver, so a row's x-delivery-count would reach
// consumers as the queue's count. The relay cannot know the queue type,
// so such an event goes DEAD naming the header.
func TestHeadersRabbitMQReplacesGoDead(t *testing.T) {
	t.Parallel()
	exchange, typ := exchangeWithQueue(t)
	p := openPublisher(t, amqptest.DriverURL("", "exchange="+exchange))
	bad := newEvent(typ, "k", "{}", `{"x-delivery-count":"7"}`)
	// Two spellings of content-type compete for the one content_type
	// property: which won depended on map order.
	twins := newEvent(typ, "k", "{}", `{"Content-Type":"a/b","content-type":"c/d"}`)
	good := newEvent(typ, "k", "{}", "")
	errs := publishertest.Publish(t, p, bad, twins, good)
	if !publisher.IsPermanent(errs[0]) || !strings.Contains(errs[0].Error(), `header "x-delivery-count"`) || !strings.Contains(errs[0].Error(), "quorum") {
		t.Errorf("row header x-delivery-count: %v, want DEAD naming the header and the rule", errs[0])
	}
	if !publisher.IsPermanent(errs[1]) || !strings.Contains(errs[1].Error(), `headers "Content-Type" and "content-type": both give the content_type property`) {
		t.Errorf("two content-type headers: %v, want DEAD naming both", errs[1])
	}
	if errs[2] != nil {
		t.Fatalf("good event: %v", errs[2])
	}
	if got := amqptest.Drain(t, typ, 1); len(got) != 1 || got[0].MessageId != good.ID.String() {
		t.Errorf("queue holds %d messages, want only the good one", len(got))
	}
}
