package amqp

// In package amqp, as the driver's other tests are: the frame limit test
// builds messages without a broker.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/relay/internal/harness/amqptest"
	"github.com/outbox-relay/relay/internal/harness/cetest"
	"github.com/outbox-relay/relay/pkg/inbox/eventid"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/cloudevents"
	"github.com/outbox-relay/relay/pkg/publisher/publishertest"
)

// ceHeaders turns a delivery into what cetest.AMQP reads: its headers as
// strings, and its content_type property as "content-type".
func ceHeaders(t *testing.T, d amqp091.Delivery) map[string]string {
	t.Helper()
	h := map[string]string{}
	for k, v := range d.Headers {
		s, ok := v.(string)
		if !ok {
			t.Errorf("header %s is a %T, want a string", k, v)
		}
		h[k] = s
	}
	if d.ContentType != "" {
		h["content-type"] = d.ContentType
	}
	return h
}

func TestCloudEventsDecodeWithTheSDK(t *testing.T) {
	t.Parallel()
	ch := amqptest.Channel(t)
	exchange := amqptest.Exchange(t, ch, "topic")
	typ := "orders." + strings.ReplaceAll(uuid.NewString(), "-", "")
	amqptest.BoundQueue(t, ch, exchange, typ)
	ctx := publisher.WithTable(context.Background(), "outbox")
	p, err := publisher.Open(ctx, amqptest.DriverURL("", "exchange="+exchange+"&format=cloudevents"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })

	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	e := outbox.Event{ID: uuid.Must(uuid.NewV7()), Type: typ, PartitionKey: "customer 7 α", Payload: []byte(`{"n":1}`),
		Headers:   []byte(`{"Content-Type":"application/json","traceparent":"` + tp + `","cloudEvents:id":"forged","CLOUDEVENTS:TYPE":"forged","cloudEvents:subject":"order-9","tenant":"t1"}`),
		CreatedAt: time.Date(2026, 11, 23, 4, 5, 6, 250000000, time.UTC)}
	plain := outbox.Event{ID: uuid.Must(uuid.NewV7()), Type: typ, Payload: []byte("raw"), CreatedAt: time.Now()}
	publishertest.RequireDelivered(t, publishertest.Publish(t, p, e, plain))

	got := amqptest.Drain(t, typ, 2)
	if len(got) != 2 {
		t.Fatalf("queue holds %d messages, want 2", len(got))
	}
	if id, err := eventid.CloudEventsAMQP(got[0].Headers); id != e.ID.String() {
		t.Errorf("eventid.CloudEventsAMQP = %q, %v; want %s", id, err, e.ID)
	}
	h := ceHeaders(t, got[0])
	ev, err := cetest.Headers(cetest.AMQP, h, got[0].Body)
	if err != nil {
		t.Fatalf("the SDK cannot decode the message: %v (headers %v)", err, h)
	}
	cetest.Check(t, ev, e, cetest.Want{Source: "/outbox", DataContentType: "application/json", Traceparent: tp})
	if ev.Subject() != "order-9" {
		t.Errorf("subject %q: a row's cloudEvents:subject header should travel as the attribute", ev.Subject())
	}
	if got[0].Headers["cloudEvents:time"] != "2026-11-23T04:05:06.25Z" {
		t.Errorf("cloudEvents:time = %v, want RFC 3339 with the fraction AMQP's own timestamp would lose", got[0].Headers["cloudEvents:time"])
	}
	for _, k := range []string{outbox.HeaderEventID, outbox.HeaderEventType, outbox.HeaderPartitionKey, "cloudEvents:datacontenttype"} {
		if v, ok := got[0].Headers[k]; ok {
			t.Errorf("header %s = %v sent with format=cloudevents", k, v)
		}
	}
	for k, v := range got[0].Headers {
		if v == "forged" {
			t.Errorf("the row's %s header travelled next to the relay's attribute", k)
		}
	}
	if got[0].MessageId != e.ID.String() || got[0].Headers["tenant"] != "t1" {
		t.Errorf("message_id %q headers %v: want the event id and the row's own headers", got[0].MessageId, got[0].Headers)
	}

	ev, err = cetest.Headers(cetest.AMQP, ceHeaders(t, got[1]), got[1].Body)
	if err != nil {
		t.Fatalf("the SDK cannot decode the message: %v", err)
	}
	cetest.Check(t, ev, plain, cetest.Want{Source: "/outbox"})
}

// TestCloudEventsCountTowardTheFrameLimit: the attributes are part of the
// content header frame, which must fit in frame_max.
func TestCloudEventsCountTowardTheFrameLimit(t *testing.T) {
	t.Parallel()
	e := outbox.Event{ID: uuid.New(), Type: "t", Payload: []byte("x"), CreatedAt: time.Now()}
	relay := &Publisher{}
	relay.maxSize.Store(MaxMessageSizeDefault)
	msg, err := relay.message(&e, 0)
	if err != nil {
		t.Fatal(err)
	}
	frameMax := headerFrameSize(&msg) + 10
	if _, err := relay.message(&e, frameMax); err != nil {
		t.Fatalf("relay format within frame_max: %v", err)
	}
	ce := &Publisher{ce: cloudevents.Config{Enabled: true}.Mapper(context.Background())}
	ce.maxSize.Store(MaxMessageSizeDefault)
	if _, err := ce.message(&e, frameMax); err == nil || !strings.Contains(err.Error(), "properties and headers too large") {
		t.Errorf("CloudEvents attributes over frame_max: %v, want properties and headers too large", err)
	}
}

func TestCloudEventsOptions(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ query, want string }{
		{"?format=amqp", `format="amqp" is not one of relay`},
		{"?ce_source=/x", "needs format=cloudevents"},
	} {
		if _, err := publisher.Open(context.Background(), "amqp://127.0.0.1:1/"+tt.query); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error containing %q", tt.query, err, tt.want)
		}
	}
}
