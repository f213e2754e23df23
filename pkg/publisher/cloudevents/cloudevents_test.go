package cloudevents_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/internal/harness/cetest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/cloudevents"
)

func TestParseOptions(t *testing.T) {
	t.Parallel()
	good := []struct {
		query string
		want  cloudevents.Config
	}{
		{"", cloudevents.Config{}},
		{"format=relay", cloudevents.Config{}},
		{"format=cloudevents", cloudevents.Config{Enabled: true}},
		{"format=cloudevents&ce_source=/orders", cloudevents.Config{Enabled: true, Source: "/orders"}},
		{"format=cloudevents&ce_source=urn:example:orders", cloudevents.Config{Enabled: true, Source: "urn:example:orders"}},
		{"format=cloudevents&ce_source=https%3A%2F%2Fexample.com%2Forders", cloudevents.Config{Enabled: true, Source: "https://example.com/orders"}},
	}
	for _, tt := range good {
		q, _ := url.ParseQuery(tt.query)
		got, err := cloudevents.ParseOptions(q)
		if err != nil || got != tt.want {
			t.Errorf("ParseOptions(%s) = %+v, %v; want %+v", tt.query, got, err, tt.want)
		}
	}
	bad := []struct{ query, want string }{
		{"format=json", `format="json" is not one of relay (the default: X-Event-* headers), cloudevents`},
		{"format=CloudEvents", "is not one of relay"},
		{"format=", "is not one of relay"},
		{"format=cloudevents&format=relay", "option format is given 2 times"},
		{"ce_source=/orders", "needs format=cloudevents"},
		{"format=cloudevents&ce_source=", "the source cannot be empty"},
		{"format=cloudevents&ce_source=a%20b", "percent-encode spaces"},
		{"format=cloudevents&ce_source=%0a", "control character"},
		{"format=cloudevents&ce_source=%25zz", "not a URI-reference"},
	}
	for _, tt := range bad {
		q, _ := url.ParseQuery(tt.query)
		if _, err := cloudevents.ParseOptions(q); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseOptions(%s) = %v, want an error containing %q", tt.query, err, tt.want)
		}
	}
}

func TestMapperSource(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if m := (cloudevents.Config{}).Mapper(ctx); m != nil {
		t.Errorf("Mapper with CloudEvents off = %v, want nil", m)
	}
	on := cloudevents.Config{Enabled: true}
	if got := on.Mapper(ctx).Source(); got != cloudevents.SourceDefault {
		t.Errorf("source without table = %q, want %q", got, cloudevents.SourceDefault)
	}
	withTable := publisher.WithTable(ctx, "public.orders_outbox")
	if got := on.Mapper(withTable).Source(); got != "/public.orders_outbox" {
		t.Errorf("source with table = %q, want /public.orders_outbox", got)
	}
	on.Source = "urn:x"
	if got := on.Mapper(withTable).Source(); got != "urn:x" {
		t.Errorf("source with ce_source = %q, want urn:x", got)
	}
}

func event() outbox.Event {
	return outbox.Event{
		ID:           uuid.MustParse("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"),
		Type:         "order.created",
		PartitionKey: "customer 42 €",
		Payload:      []byte(`{"n":1}`),
		CreatedAt:    time.Date(2026, 11, 23, 4, 5, 6, 789000000, time.FixedZone("x", 3600)),
	}
}

func TestAttributes(t *testing.T) {
	t.Parallel()
	m := cloudevents.Config{Enabled: true, Source: "/orders"}.Mapper(context.Background())
	e := event()
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	got, err := m.Attributes(&e, map[string]string{"Content-Type": "application/json", "traceparent": tp, "tracestate": "a=b"})
	if err != nil {
		t.Fatal(err)
	}
	want := []cloudevents.Attribute{
		{Name: "specversion", Value: "1.0"},
		{Name: "id", Value: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"},
		{Name: "source", Value: "/orders"},
		{Name: "type", Value: "order.created"},
		{Name: "time", Value: "2026-11-23T03:05:06.789Z"},
		{Name: "datacontenttype", Value: "application/json"},
		{Name: "partitionkey", Value: "customer 42 €"},
		{Name: "traceparent", Value: tp},
		{Name: "tracestate", Value: "a=b"},
	}
	if len(got) != len(want) {
		t.Fatalf("Attributes = %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("attribute %d = %q, want %q", i, got[i], want[i])
		}
	}

	bare := e
	bare.PartitionKey = ""
	got, err = m.Attributes(&bare, nil)
	if err != nil || len(got) != 5 {
		t.Errorf("Attributes without key or headers = %q, %v; want the 5 required and time", got, err)
	}

	for _, tt := range []struct {
		name string
		edit func(*outbox.Event)
		h    map[string]string
		want string
	}{
		{"type with a line break", func(e *outbox.Event) { e.Type = "a\nb" }, nil, "event_type cannot be a CloudEvents type"},
		{"key with C1 control", func(e *outbox.Event) { e.PartitionKey = "a\u0085" }, nil, "partition_key cannot"},
		{"key not UTF-8", func(e *outbox.Event) { e.PartitionKey = "\xff" }, nil, "not valid UTF-8"},
		{"traceparent with a tab", func(*outbox.Event) {}, map[string]string{"traceparent": "a\tb"}, "header traceparent"},
		// One attribute, two values: which one would travel depended on
		// map order, and the other was lost without a word.
		{"content type twice", func(*outbox.Event) {}, map[string]string{"Content-Type": "a/b", "content-type": "c/d"},
			`headers "Content-Type" and "content-type": both give the CloudEvents attribute datacontenttype`},
		{"traceparent twice", func(*outbox.Event) {}, map[string]string{"Traceparent": "x", "traceparent": "y", "TRACEPARENT": "z"}, "both give the CloudEvents attribute traceparent"},
	} {
		e := event()
		tt.edit(&e)
		if _, err := m.Attributes(&e, tt.h); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Attributes = %v, want an error containing %q", tt.name, err, tt.want)
		}
	}
}

func TestIsRelayAttribute(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		prefix, name string
		want         bool
	}{
		{"ce-", "ce-id", true},
		{"ce-", "Ce-Id", true},
		{"ce-", "CE-TRACEPARENT", true},
		{"ce_", "ce_partitionkey", true},
		{"cloudEvents:", "cloudevents:type", true},
		{"ce-", "ce-subject", false},
		{"ce-", "ce-", false},
		{"ce-", "id", false},
		{"ce-", "ce_id", false},
		{"ce_", "x-ce_id", false},
	} {
		if got := cloudevents.IsRelayAttribute(tt.prefix, tt.name); got != tt.want {
			t.Errorf("IsRelayAttribute(%q, %q) = %v, want %v", tt.prefix, tt.name, got, tt.want)
		}
	}
}

func TestPercentEncode(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"":                 "",
		"order.created":    "order.created",
		"Euro € 😀":         "Euro%20%E2%82%AC%20%F0%9F%98%80",
		`say "100%"`:       "say%20%22100%25%22",
		"tab\tand\x7fdel":  "tab%09and%7Fdel",
		"/a?b=c&d#e:f@g+h": "/a?b=c&d#e:f@g+h",
	} {
		if got := cloudevents.PercentEncode(in); got != want {
			t.Errorf("PercentEncode(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestSDKDecodesTheMapping checks the mapping itself with the CloudEvents
// SDK, through the HTTP binding and a header binding, before any broker.
func TestSDKDecodesTheMapping(t *testing.T) {
	t.Parallel()
	m := cloudevents.Config{Enabled: true}.Mapper(publisher.WithTable(context.Background(), "outbox"))
	e := event()
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	attrs, err := m.Attributes(&e, map[string]string{"content-type": "application/json", "traceparent": tp})
	if err != nil {
		t.Fatal(err)
	}
	want := cetest.Want{Source: "/outbox", DataContentType: "application/json", Traceparent: tp}

	h := http.Header{}
	for _, a := range attrs {
		if a.Name == cloudevents.AttrDataContentType {
			h.Set("Content-Type", a.Value)
			continue
		}
		h.Set("ce-"+a.Name, cloudevents.PercentEncode(a.Value))
	}
	got, err := cetest.HTTP(h, e.Payload)
	if err != nil {
		t.Fatalf("HTTP: %v", err)
	}
	cetest.Check(t, got, e, want)

	nats := map[string]string{}
	for _, a := range attrs {
		nats["ce-"+a.Name] = cloudevents.PercentEncode(a.Value)
	}
	if got, err = cetest.Headers(cetest.NATS, nats, e.Payload); err != nil {
		t.Fatalf("NATS: %v", err)
	}
	cetest.Check(t, got, e, want)

	delete(nats, "ce-id")
	if _, err := cetest.Headers(cetest.NATS, nats, e.Payload); err == nil {
		t.Error("an event without ce-id decoded; the SDK's validation should refuse it")
	}
}

// BenchmarkAttributes is the mapping's cost per event, which every driver
// pays on top of its own with format=cloudevents.
func BenchmarkAttributes(b *testing.B) {
	m := cloudevents.Config{Enabled: true}.Mapper(publisher.WithTable(context.Background(), "outbox"))
	e := event()
	h := map[string]string{"content-type": "application/json", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	b.ReportAllocs()
	for range b.N {
		attrs, err := m.Attributes(&e, h)
		if err != nil || len(attrs) != 8 {
			b.Fatal(attrs, err)
		}
		for _, a := range attrs {
			_ = cloudevents.PercentEncode(a.Value)
		}
	}
}
