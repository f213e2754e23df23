package webhook_test

import (
	"context"
	"strings"
	"testing"

	"github.com/outbox-relay/relay/internal/harness/cetest"
	"github.com/outbox-relay/relay/internal/harness/webhooktest"
	"github.com/outbox-relay/relay/pkg/inbox/eventid"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/publishertest"
	"github.com/outbox-relay/relay/pkg/publisher/webhook"
)

func TestCloudEventsDecodeWithTheSDK(t *testing.T) {
	t.Parallel()
	rcv := webhooktest.Start(t)
	ctx := publisher.WithTable(context.Background(), "public.orders_outbox")
	p, err := publisher.Open(ctx, signedURL(t, rcv, "/in", "&format=cloudevents"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })

	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	e := newEvent("orders.created", `customer "7" α 100%`, 0)
	e.Headers = []byte(`{"content-type":"application/json","traceparent":"` + tp + `","ce-id":"forged","Ce-Source":"forged","ce-subject":"order-9","x-tenant":"t1"}`)
	plain := newEvent("plain", "", 1)
	plain.Headers = []byte(`{"ce-partitionkey":"forged","CE-TRACEPARENT":"forged"}`)
	publishertest.RequireDelivered(t, publishertest.Publish(t, p, e, plain))

	byID := map[string]webhooktest.Request{}
	for _, r := range rcv.Delivered(t, 2, nil) {
		byID[r.Header.Get("webhook-id")] = r
	}
	r := byID[e.ID.String()]
	if id, err := eventid.CloudEventsHeaders(r.Header); id != e.ID.String() {
		t.Errorf("eventid.CloudEventsHeaders = %q, %v; want %s", id, err, e.ID)
	}
	got, err := cetest.HTTP(r.Header, r.Body)
	if err != nil {
		t.Fatalf("the SDK cannot decode the request: %v (headers %v)", err, r.Header)
	}
	cetest.Check(t, got, e, cetest.Want{Source: "/public.orders_outbox", DataContentType: "application/json", Traceparent: tp})
	if s := got.Subject(); s != "order-9" {
		t.Errorf("subject %q: a row's ce-subject header should travel as the attribute", s)
	}
	for _, h := range []string{outbox.HeaderEventID, outbox.HeaderEventType, outbox.HeaderPartitionKey} {
		if v, ok := r.Header[h]; ok {
			t.Errorf("header %s = %q sent with format=cloudevents", h, v)
		}
	}
	if got := r.Header.Values("Ce-Partitionkey"); len(got) != 1 || got[0] != "customer%20%227%22%20%CE%B1%20100%25" {
		t.Errorf("ce-partitionkey %q, want it percent-encoded once", got)
	}
	if r.Header.Get("X-Tenant") != "t1" || r.Header.Get("Traceparent") != tp {
		t.Errorf("the row's own headers did not travel: %v", r.Header)
	}
	verify(t, webhooktest.Secret, r)

	r = byID[plain.ID.String()]
	got, err = cetest.HTTP(r.Header, r.Body)
	if err != nil {
		t.Fatalf("the SDK cannot decode the request: %v", err)
	}
	cetest.Check(t, got, plain, cetest.Want{Source: "/public.orders_outbox", DataContentType: webhook.ContentTypeDefault})
	for _, k := range []string{"Ce-Partitionkey", "Ce-Traceparent"} {
		if v, ok := r.Header[k]; ok {
			t.Errorf("an event without a partition key or trace got %s %q (from the row)", k, v)
		}
	}
}

func TestCloudEventsSourceOptionAndNoTable(t *testing.T) {
	t.Parallel()
	rcv := webhooktest.Start(t)
	for _, tt := range []struct{ query, want string }{
		{"&format=cloudevents", "/outbox"},
		{"&format=cloudevents&ce_source=urn:example:orders", "urn:example:orders"},
	} {
		p := openPublisher(t, rcv.URL("/?unsigned=true"+tt.query))
		e := newEvent("a", "", 0)
		publishertest.RequireDelivered(t, publishertest.Publish(t, p, e))
		req := rcv.Delivered(t, 1, func(r *webhooktest.Request) bool { return r.Header.Get("webhook-id") == e.ID.String() })[0]
		got, err := cetest.HTTP(req.Header, req.Body)
		if err != nil {
			t.Fatalf("%s: %v", tt.query, err)
		}
		if got.Source() != tt.want {
			t.Errorf("%s: source %q, want %q", tt.query, got.Source(), tt.want)
		}
	}
}

func TestCloudEventsRefusals(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ query, want string }{
		{"?unsigned=true&format=json", `format="json" is not one of relay`},
		{"?unsigned=true&format=cloudevents&header=Ce-Id:x", `header "Ce-Id": with format=cloudevents the relay sets it`},
		{"?unsigned=true&ce_source=/x", "needs format=cloudevents"},
	} {
		if _, err := parse(t, "http://localhost:1/"+tt.query); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error containing %q", tt.query, err, tt.want)
		}
	}
	// A header option the relay does not set as an attribute is fine.
	if _, err := parse(t, "http://localhost:1/?unsigned=true&format=cloudevents&header=ce-dataschema:urn:s"); err != nil {
		t.Errorf("header=ce-dataschema: %v", err)
	}

	rcv := webhooktest.Start(t)
	p := openPublisher(t, rcv.URL("/?unsigned=true&format=cloudevents"))
	bad := newEvent("a\u0085b", "", 0)
	errs := publishertest.Publish(t, p, bad)
	if !publisher.IsPermanent(errs[0]) || !strings.Contains(errs[0].Error(), "CloudEvents type") {
		t.Errorf("event_type with a control character: %v, want a permanent error naming the CloudEvents type", errs[0])
	}
}
