package nats_test

import (
	"context"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/relay/internal/harness/cetest"
	"github.com/outbox-relay/relay/internal/harness/natstest"
	"github.com/outbox-relay/relay/pkg/inbox/eventid"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/publishertest"
)

func firstValues(h natsgo.Header) map[string]string {
	m := make(map[string]string, len(h))
	for k, vs := range h {
		m[k] = vs[0]
	}
	return m
}

func TestCloudEventsDecodeWithTheSDK(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	ordersStream(t, srv, jetstream.StreamConfig{})
	ctx := publisher.WithTable(context.Background(), "app.outbox")
	pub, err := publisher.Open(ctx, srv.URL()+"?format=cloudevents")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = pub.Close(ctx)
	})

	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	e := event("orders.created", ` customer "7" α `, `{"n":1}`,
		`{"content-type":"application/json","traceparent":"`+tp+`","ce-id":"forged","CE-SOURCE":"forged","ce-subject":"order 9","x-tenant":"t1"}`)
	e.CreatedAt = time.Date(2026, 11, 23, 4, 5, 6, 1000, time.UTC)
	plain := event("orders.paid", "", "", "")
	plain.CreatedAt = time.Now()
	publishertest.RequireDelivered(t, publishertest.Publish(t, pub, e, plain))

	msgs := stored(t, srv, "ORDERS")
	if len(msgs) != 2 {
		t.Fatalf("stream holds %d messages, want 2", len(msgs))
	}
	if id, err := eventid.CloudEventsHeaders(msgs[0].Header); id != e.ID.String() {
		t.Errorf("eventid.CloudEventsHeaders = %q, %v; want %s", id, err, e.ID)
	}
	h := firstValues(msgs[0].Header)
	got, err := cetest.Headers(cetest.NATS, h, msgs[0].Data)
	if err != nil {
		t.Fatalf("the SDK cannot decode the message: %v (headers %v)", err, h)
	}
	// Leading and trailing spaces survive because they are percent-encoded;
	// nats.go would trim them otherwise.
	cetest.Check(t, got, e, cetest.Want{Source: "/app.outbox", DataContentType: "application/json", Traceparent: tp})
	if got.Subject() != "order 9" {
		t.Errorf("subject %q: a row's ce-subject header should travel as the attribute", got.Subject())
	}
	if len(msgs[0].Header.Values("ce-id")) != 1 || h[natsgo.MsgIdHdr] != e.ID.String() {
		t.Errorf("headers %v: want one ce-id and Nats-Msg-Id, the event id", msgs[0].Header)
	}
	for _, k := range []string{outbox.HeaderEventID, outbox.HeaderEventType, outbox.HeaderPartitionKey} {
		if v, ok := h[k]; ok {
			t.Errorf("header %s = %q sent with format=cloudevents", k, v)
		}
	}
	for k, v := range h {
		if v == "forged" {
			t.Errorf("the row's %s header travelled next to the relay's attribute", k)
		}
	}
	if h["x-tenant"] != "t1" {
		t.Errorf("the row's own header did not travel: %v", h)
	}

	h = firstValues(msgs[1].Header)
	if got, err = cetest.Headers(cetest.NATS, h, msgs[1].Data); err != nil {
		t.Fatalf("the SDK cannot decode the message: %v", err)
	}
	cetest.Check(t, got, plain, cetest.Want{Source: "/app.outbox"})
}

// TestCloudEventsCountTowardTheHeaderLimit sends a row header that fits
// JetStream's 64 KiB of headers next to the X-Event-* headers but not next
// to the attributes, which are longer.
func TestCloudEventsCountTowardTheHeaderLimit(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	ordersStream(t, srv, jetstream.StreamConfig{})
	fill := event("orders.created", "k", "{}", "")
	own := len("NATS/1.0\r\n") + len("\r\n") +
		len("Nats-Msg-Id: \r\n") + 36 + len("X-Event-ID: \r\n") + 36 +
		len("X-Event-Type: \r\n") + len(fill.Type) + len("X-Partition-Key: \r\n") + 1
	fill.Headers = []byte(`{"big":"` + strings.Repeat("v", 65535-own-len("big: \r\n")) + `"}`)
	fill.CreatedAt = time.Now()

	publishertest.RequireDelivered(t, publishertest.Publish(t, open(t, srv, ""), fill))
	err := publishertest.Publish(t, open(t, srv, "?format=cloudevents"), fill)[0]
	if !publisher.IsPermanent(err) || !strings.Contains(err.Error(), "headers too large") {
		t.Errorf("the same event with CloudEvents attributes: %v, want permanent, headers too large", err)
	}
}

func TestCloudEventsOptions(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ query, want string }{
		{"?format=structured", `format="structured" is not one of relay`},
		{"?ce_source=/x", "needs format=cloudevents"},
		{"?format=cloudevents&ce_source=", "the source cannot be empty"},
	} {
		if _, err := publisher.Open(context.Background(), "nats://127.0.0.1:1"+tt.query); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error containing %q", tt.query, err, tt.want)
		}
	}
}
