package nats_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/natstest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/nats"
	"github.com/outbox-relay/relay/pkg/publisher/publishertest"
)

// waitLong bounds every eventually-wait; reconnecting takes about a second.
const waitLong = 20 * time.Second

// open connects the driver to srv through publisher.Open, so the nats://
// registration and URL parsing are part of every test.
func open(t *testing.T, srv *natstest.Server, query string) publisher.Publisher {
	t.Helper()
	return openURL(t, srv.URL()+query)
}

func openURL(t *testing.T, rawURL string) publisher.Publisher {
	t.Helper()
	pub, err := publisher.Open(context.Background(), rawURL)
	if err != nil {
		t.Fatalf("publisher.Open(%s): %v", rawURL, err)
	}
	t.Cleanup(func() {
		// Acks that will never come must not hold the test up for the
		// whole timeout: Close gives up on a done context.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := pub.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return pub
}

func event(typ, key, payload, headers string) outbox.Event {
	return outbox.Event{
		ID:           uuid.New(),
		Type:         typ,
		PartitionKey: key,
		Payload:      []byte(payload),
		Headers:      []byte(headers),
	}
}

// ordersStream creates the stream ORDERS on orders.> with cfg's limits.
func ordersStream(t *testing.T, srv *natstest.Server, cfg jetstream.StreamConfig) {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = "ORDERS"
	}
	if cfg.Subjects == nil {
		cfg.Subjects = []string{"orders.>"}
	}
	srv.Stream(t, cfg)
}

// stored reads a stream through a fresh connection, so it also works after
// the server was restarted.
func stored(t *testing.T, srv *natstest.Server, name string) []*jetstream.RawStreamMsg {
	t.Helper()
	_, js := srv.Connect(t)
	st, err := js.Stream(context.Background(), name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	return natstest.Messages(t, st)
}

func storedIDs(msgs []*jetstream.RawStreamMsg) []string {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.Header.Get(natsgo.MsgIdHdr)
	}
	return ids
}

func TestPublishBatchArrivesComplete(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, query, eventType, subject string
	}{
		{"no prefix", "", "orders.created", "orders.created"},
		{"with prefix", "?subject_prefix=orders.", "created", "orders.created"},
		{"prefix and dotted type", "?subject_prefix=orders.", "eu.created", "orders.eu.created"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := natstest.Start(t)
			ordersStream(t, srv, jetstream.StreamConfig{})
			pub := open(t, srv, tc.query)

			withKey := event(tc.eventType, "customer-7", `{"id":1}`,
				`{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",`+
					`"Str":"plain text","Int":42,"Neg":-3,"Float":1.50,"Exp":1e3,"Yes":true,"No":false,"Nothing":null}`)
			withKey.Payload = []byte{0x00, 0xff, '\n', 'x'} // binary payloads go through untouched
			noKey := event(tc.eventType, "", "second", "")
			nullHeaders := event(tc.eventType, "k", "", "null")
			batch := []outbox.Event{withKey, noKey, nullHeaders}

			publishertest.RequireDelivered(t, publishertest.Publish(t, pub, batch...))

			msgs := stored(t, srv, "ORDERS")
			if len(msgs) != len(batch) {
				t.Fatalf("stream holds %d messages, want %d", len(msgs), len(batch))
			}
			for i, m := range msgs {
				e := batch[i]
				if m.Subject != tc.subject {
					t.Errorf("message %d: subject %q, want %q", i, m.Subject, tc.subject)
				}
				if string(m.Data) != string(e.Payload) {
					t.Errorf("message %d: data %q, want %q", i, m.Data, e.Payload)
				}
				for name, want := range map[string]string{
					natsgo.MsgIdHdr:        e.ID.String(),
					outbox.HeaderEventID:   e.ID.String(),
					outbox.HeaderEventType: e.Type,
				} {
					if got := m.Header.Values(name); len(got) != 1 || got[0] != want {
						t.Errorf("message %d: header %s = %q, want [%q]", i, name, got, want)
					}
				}
				key := m.Header.Values(outbox.HeaderPartitionKey)
				switch {
				case e.PartitionKey == "" && len(key) != 0:
					t.Errorf("message %d: %s = %q, want the header absent for an empty key", i, outbox.HeaderPartitionKey, key)
				case e.PartitionKey != "" && (len(key) != 1 || key[0] != e.PartitionKey):
					t.Errorf("message %d: %s = %q, want [%q]", i, outbox.HeaderPartitionKey, key, e.PartitionKey)
				}
			}

			want := map[string]string{
				outbox.HeaderTraceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
				"Str":                    "plain text",
				"Int":                    "42",
				"Neg":                    "-3",
				"Float":                  "1.50",
				"Exp":                    "1e3",
				"Yes":                    "true",
				"No":                     "false",
			}
			h := msgs[0].Header
			for name, value := range want {
				if got := h.Values(name); len(got) != 1 || got[0] != value {
					t.Errorf("row header %s = %q, want [%q]", name, got, value)
				}
			}
			if got, ok := h["Nothing"]; ok {
				t.Errorf("null header Nothing sent as %q, want it left out", got)
			}
			// The row's headers plus Nats-Msg-Id and the three X- headers.
			if len(h) != len(want)+4 {
				t.Errorf("first message has headers %v, want exactly the row's %d plus 4", h, len(want))
			}
			// No row headers: only Nats-Msg-Id, X-Event-ID, X-Event-Type (no key).
			if len(msgs[1].Header) != 3 {
				t.Errorf("second message has headers %v, want only the 3 driver headers", msgs[1].Header)
			}
		})
	}
}

// TestReservedRowHeadersAreLeftOut sends row headers that JetStream would
// act on, and headers named like the driver's own in another case. Sent,
// Nats-Rollup would be refused by this stream and Nats-Expected-Stream would
// fail the publish; X-Event-ID in lower case would travel next to the real
// one.
func TestReservedRowHeadersAreLeftOut(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	ordersStream(t, srv, jetstream.StreamConfig{})
	pub := open(t, srv, "")

	e := event("orders.created", "k", "{}", `{"Nats-Rollup":"all","nats-expected-stream":"OTHER",`+
		`"NATS-Msg-Id":"not-the-event-id","x-event-id":"spoofed","X-EVENT-TYPE":"spoofed",`+
		`"x-partition-key":"spoofed","Natsy":"kept","X-Event-Source":"kept"}`)
	publishertest.RequireDelivered(t, publishertest.Publish(t, pub, e))

	msgs := stored(t, srv, "ORDERS")
	if len(msgs) != 1 {
		t.Fatalf("stream holds %d messages, want 1", len(msgs))
	}
	want := natsgo.Header{
		natsgo.MsgIdHdr:           {e.ID.String()},
		outbox.HeaderEventID:      {e.ID.String()},
		outbox.HeaderEventType:    {e.Type},
		outbox.HeaderPartitionKey: {e.PartitionKey},
		"Natsy":                   {"kept"},
		"X-Event-Source":          {"kept"},
	}
	if got := msgs[0].Header; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("headers\n got %v\nwant %v", got, want)
	}
}

func TestPublishKeepsPerKeyOrderWithinBatch(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	ordersStream(t, srv, jetstream.StreamConfig{})
	pub := open(t, srv, "?max_pending=8") // more events than slots: the stall path keeps order too

	keys := []string{"a", "b", "c", ""}
	var batch []outbox.Event
	for i := range 200 {
		batch = append(batch, event("orders.updated", keys[i%len(keys)], fmt.Sprintf("%d", i), fmt.Sprintf(`{"seq":%d}`, i)))
	}
	publishertest.RequireDelivered(t, publishertest.Publish(t, pub, batch...))

	msgs := stored(t, srv, "ORDERS")
	if len(msgs) != len(batch) {
		t.Fatalf("stream holds %d messages, want %d", len(msgs), len(batch))
	}
	wantByKey := map[string][]string{}
	for _, e := range batch {
		wantByKey[e.PartitionKey] = append(wantByKey[e.PartitionKey], e.ID.String())
	}
	gotByKey := map[string][]string{}
	for _, m := range msgs {
		k := m.Header.Get(outbox.HeaderPartitionKey)
		gotByKey[k] = append(gotByKey[k], m.Header.Get(outbox.HeaderEventID))
	}
	for k, want := range wantByKey {
		if strings.Join(gotByKey[k], ",") != strings.Join(want, ",") {
			t.Errorf("key %q: stream order differs from batch order\n got %v\nwant %v", k, gotByKey[k], want)
		}
	}
}

func TestPublishDuplicateIsDelivered(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	ordersStream(t, srv, jetstream.StreamConfig{Duplicates: time.Hour})
	pub := open(t, srv, "")

	first := event("orders.created", "k", "first", "")
	again := first
	again.Payload = []byte("sent again after a crash")

	publishertest.RequireDelivered(t, publishertest.Publish(t, pub, first))
	publishertest.RequireDelivered(t, publishertest.Publish(t, pub, again))
	// The same id twice within one batch is also acknowledged twice.
	other := event("orders.created", "k", "other", "")
	publishertest.RequireDelivered(t, publishertest.Publish(t, pub, other, other, first))

	msgs := stored(t, srv, "ORDERS")
	if got, want := storedIDs(msgs), []string{first.ID.String(), other.ID.String()}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("stream holds %v, want each event once: %v", got, want)
	}
	if string(msgs[0].Data) != "first" {
		t.Errorf("stream kept %q, want the first copy", msgs[0].Data)
	}
}

func TestPublishPermanentErrors(t *testing.T) {
	t.Parallel()
	type setup struct {
		serverOpts func(*server.Options)
		stream     jetstream.StreamConfig
		query      string
		// extra is a second stream for the good events of the prefix cases.
		extra *jetstream.StreamConfig
	}
	big := func(n int) string { return strings.Repeat("x", n) }
	cases := []struct {
		name  string
		setup setup
		bad   outbox.Event
		want  string
	}{
		{name: "no stream for subject", bad: event("payments.created", "k", "{}", ""), want: `no JetStream stream captures subject "payments.created"`},
		{name: "no stream for prefixed subject", setup: setup{query: "?subject_prefix=billing.",
			extra: &jetstream.StreamConfig{Name: "BILLING", Subjects: []string{"billing.created"}}},
			bad: event("orders.created", "k", "{}", ""), want: `no JetStream stream captures subject "billing.orders.created"`},
		{name: "bigger than stream max_msg_size", setup: setup{stream: jetstream.StreamConfig{MaxMsgSize: 512}},
			bad: event("orders.created", "k", big(1000), ""), want: "max_msg_size"},
		{name: "bigger than server max_payload", setup: setup{serverOpts: func(o *server.Options) { o.MaxPayload = 1024 }},
			bad: event("orders.created", "k", big(2048), ""), want: "max_payload"},
		{name: "empty event type", bad: event("", "k", "{}", ""), want: "event_type is empty"},
		{name: "empty event type with prefix", setup: setup{query: "?subject_prefix=orders."},
			bad: event("", "k", "{}", ""), want: `invalid subject "orders."`},
		{name: "empty token", bad: event("orders..created", "k", "{}", ""), want: `invalid subject "orders..created"`},
		{name: "star wildcard", bad: event("orders.*", "k", "{}", ""), want: `invalid subject "orders.*"`},
		{name: "full wildcard", bad: event("orders.>", "k", "{}", ""), want: `invalid subject "orders.>"`},
		{name: "space", bad: event("orders.created now", "k", "{}", ""), want: `invalid subject "orders.created now"`},
		{name: "tab", bad: event("orders.created\tnow", "k", "{}", ""), want: "invalid subject"},
		{name: "trailing dot", bad: event("orders.created.", "k", "{}", ""), want: `invalid subject "orders.created."`},
		{name: "leading dot", bad: event(".orders.created", "k", "{}", ""), want: `invalid subject ".orders.created"`},
		{name: "headers array", bad: event("orders.created", "k", "{}", "[1]"), want: "headers must be a JSON object, got an array"},
		{name: "headers string", bad: event("orders.created", "k", "{}", `"x"`), want: "headers must be a JSON object, got a string"},
		{name: "headers number", bad: event("orders.created", "k", "{}", `7`), want: "headers must be a JSON object, got a number"},
		{name: "headers invalid JSON", bad: event("orders.created", "k", "{}", `{"a":`), want: "headers are not valid JSON"},
		{name: "header value array", bad: event("orders.created", "k", "{}", `{"ok":"v","tags":["a","b"]}`), want: `header "tags": value must be a string, number or boolean, got an array`},
		{name: "header value object", bad: event("orders.created", "k", "{}", `{"meta":{"a":1}}`), want: `header "meta": value must be a string, number or boolean, got an object`},
		{name: "header name with colon", bad: event("orders.created", "k", "{}", `{"bad:name":"v"}`), want: `header "bad:name": invalid NATS header name`},
		{name: "header name with space", bad: event("orders.created", "k", "{}", `{"bad name":"v"}`), want: `header "bad name": invalid NATS header name`},
		{name: "empty header name", bad: event("orders.created", "k", "{}", `{"":"v"}`), want: `header "": invalid NATS header name`},
		{name: "header value with newline", bad: event("orders.created", "k", "{}", `{"h":"a\nInjected: yes"}`), want: `header "h": value contains a line break`},
		{name: "header value with CRLF", bad: event("orders.created", "k", "{}", `{"h":"a\r\nb"}`), want: `header "h": value contains a line break`},
		{name: "header value with CR", bad: event("orders.created", "k", "{}", `{"h":"a\rb"}`), want: `header "h": value contains a line break`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var configure []func(*server.Options)
			if tc.setup.serverOpts != nil {
				configure = append(configure, tc.setup.serverOpts)
			}
			srv := natstest.Start(t, configure...)
			ordersStream(t, srv, tc.setup.stream)
			stream, goodType := "ORDERS", "orders.created"
			if tc.setup.query != "" {
				// The prefix cases publish their good events under the prefix.
				goodType = "created"
			}
			if tc.setup.extra != nil {
				srv.Stream(t, *tc.setup.extra)
				stream = tc.setup.extra.Name
			}
			pub := open(t, srv, tc.setup.query)

			before := event(goodType, "k", "before", `{"h":"v"}`)
			after := event(goodType, "k", "after", "")
			batch := []outbox.Event{before, tc.bad, after}
			errs := pub.Publish(context.Background(), batch)
			if len(errs) != len(batch) {
				t.Fatalf("Publish returned %d results for %d events", len(errs), len(batch))
			}
			if errs[0] != nil || errs[2] != nil {
				t.Errorf("good events of the batch failed: %v, %v", errs[0], errs[2])
			}
			err := errs[1]
			switch {
			case err == nil:
				t.Fatalf("bad event published without error")
			case !publisher.IsPermanent(err):
				t.Errorf("error %q is not permanent", err)
			case publisher.IsUnavailable(err):
				t.Errorf("error %q is both permanent and unavailable", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}

			got := storedIDs(stored(t, srv, stream))
			want := []string{before.ID.String(), after.ID.String()}
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Errorf("stream %s holds %v, want only the good events %v", stream, got, want)
			}
		})
	}
}

func TestPublishUnavailableWhileServerDownThenReconnects(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	ordersStream(t, srv, jetstream.StreamConfig{})
	const timeout = 10 * time.Second
	pub := open(t, srv, "?timeout="+timeout.String())
	ctx := context.Background()

	up := event("orders.created", "k", "while up", "")
	publishertest.RequireDelivered(t, publishertest.Publish(t, pub, up))

	srv.Stop()

	batch := []outbox.Event{
		event("orders.created", "k", "1", ""),
		event("orders.created", "k", "2", ""),
		event("orders.paid", "", "3", `{"h":1}`),
	}
	start := time.Now()
	errs := pub.Publish(ctx, batch)
	elapsed := time.Since(start)
	if len(errs) != len(batch) {
		t.Fatalf("Publish returned %d results for %d events", len(errs), len(batch))
	}
	for i, err := range errs {
		if !publisher.IsUnavailable(err) || publisher.IsPermanent(err) {
			t.Errorf("event %d: got %v, want an Unavailable error", i, err)
		}
	}
	if elapsed > timeout/2 {
		t.Errorf("Publish to a stopped server took %s, want a fast failure (timeout is %s)", elapsed, timeout)
	}
	if err := pub.Ping(ctx); err == nil {
		t.Errorf("Ping succeeded with the server stopped")
	}
	// Stays unavailable while down, and fails as fast once the client
	// knows the connection is gone.
	start = time.Now()
	for i, err := range pub.Publish(ctx, batch[:1]) {
		if !publisher.IsUnavailable(err) {
			t.Errorf("second publish, event %d: got %v, want Unavailable", i, err)
		}
	}
	if elapsed := time.Since(start); elapsed > timeout/2 {
		t.Errorf("second Publish to a stopped server took %s, want a fast failure (timeout is %s)", elapsed, timeout)
	}

	srv.Restart()
	var lastPing error
	eventually.True(t, waitLong, func() bool {
		pingCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		lastPing = pub.Ping(pingCtx)
		return lastPing == nil
	}, func() string { return fmt.Sprintf("Ping to succeed after restart, last error: %v", lastPing) })

	publishertest.RequireDelivered(t, publishertest.Publish(t, pub, batch...))
	got := storedIDs(stored(t, srv, "ORDERS"))
	want := []string{up.ID.String(), batch[0].ID.String(), batch[1].ID.String(), batch[2].ID.String()}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("stream after restart holds %v, want %v", got, want)
	}
}

func TestPublishAckNeverComesIsUnavailable(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	ordersStream(t, srv, jetstream.StreamConfig{})
	// A core-NATS subscriber on a subject no stream captures: the publish
	// has a responder, so no "no responders" status, but no ack ever.
	nc, _ := srv.Connect(t)
	received := make(chan struct{}, 10)
	sub, err := nc.Subscribe("blackhole.>", func(*natsgo.Msg) { received <- struct{}{} })
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	pub := open(t, srv, "?timeout=300ms")

	batch := []outbox.Event{
		event("orders.created", "k", "acked", ""),
		event("blackhole.created", "k", "never acked", ""),
	}
	errs := pub.Publish(context.Background(), batch)
	if len(errs) != len(batch) {
		t.Fatalf("Publish returned %d results for %d events", len(errs), len(batch))
	}
	if errs[0] != nil {
		t.Errorf("acked event: %v", errs[0])
	}
	if err := errs[1]; !publisher.IsUnavailable(err) || publisher.IsPermanent(err) {
		t.Errorf("unacknowledged event: got %v, want Unavailable and not permanent", err)
	}
	select {
	case <-received:
	case <-time.After(5 * time.Second):
		t.Errorf("the subscriber never saw the message: the test did not exercise a missing ack")
	}
}

func TestPublishStreamFullIsRetryable(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	ordersStream(t, srv, jetstream.StreamConfig{MaxMsgs: 1, Discard: jetstream.DiscardNew})
	pub := open(t, srv, "")

	batch := []outbox.Event{
		event("orders.created", "k", "fits", ""),
		event("orders.created", "k", "does not fit", ""),
	}
	errs := pub.Publish(context.Background(), batch)
	if len(errs) != len(batch) {
		t.Fatalf("Publish returned %d results for %d events", len(errs), len(batch))
	}
	if errs[0] != nil {
		t.Errorf("first event: %v", errs[0])
	}
	err := errs[1]
	switch {
	case err == nil:
		t.Fatalf("second event accepted by a full DiscardNew stream")
	case publisher.IsPermanent(err):
		t.Errorf("stream full is permanent (%v); it must be retryable: the stream may drain", err)
	case publisher.IsUnavailable(err):
		t.Errorf("stream full is Unavailable (%v); it must be retryable: the broker is up", err)
	}
	if !strings.Contains(err.Error(), "maximum messages exceeded") {
		t.Errorf("error %q does not say the stream is full", err)
	}
	if got := storedIDs(stored(t, srv, "ORDERS")); len(got) != 1 || got[0] != batch[0].ID.String() {
		t.Errorf("stream holds %v, want only the first event", got)
	}
}

func TestPublishContextCancelledWhileAwaitingAcks(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	const timeout = 20 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The subscriber swallows the publish and cancels the context, so the
	// driver is certainly waiting for an ack when the context ends.
	nc, _ := srv.Connect(t)
	sub, err := nc.Subscribe("slow.>", func(*natsgo.Msg) { cancel() })
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	pub := open(t, srv, "?timeout="+timeout.String())

	batch := []outbox.Event{
		event("slow.created", "k", "1", ""),
		event("slow.created", "k", "2", ""),
	}
	start := time.Now()
	errs := pub.Publish(ctx, batch)
	elapsed := time.Since(start)
	if len(errs) != len(batch) {
		t.Fatalf("Publish returned %d results for %d events", len(errs), len(batch))
	}
	for i, err := range errs {
		if !publisher.IsUnavailable(err) || publisher.IsPermanent(err) {
			t.Errorf("event %d: got %v, want Unavailable", i, err)
		}
		if !errors.Is(err, context.Canceled) {
			t.Errorf("event %d: error %v does not wrap context.Canceled", i, err)
		}
	}
	if elapsed > timeout/2 {
		t.Errorf("Publish returned %s after the context was cancelled, want at once (timeout is %s)", elapsed, timeout)
	}
}

func TestParseURL(t *testing.T) {
	t.Parallel()
	parse := func(t *testing.T, raw string) (nats.Config, error) {
		t.Helper()
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatalf("url.Parse(%q): %v", raw, err)
		}
		return nats.ParseURL(u)
	}

	t.Run("defaults", func(t *testing.T) {
		t.Parallel()
		cfg, err := parse(t, "nats://localhost:4222")
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Timeout != nats.TimeoutDefault || cfg.MaxPending != nats.MaxPendingDefault ||
			cfg.SubjectPrefix != "" || cfg.Name != "outbox-relay" || cfg.User != "" || cfg.Password != "" ||
			cfg.MaxControlLine != nats.MaxControlLineDefault {
			t.Errorf("defaults: %+v", cfg)
		}
		if len(cfg.Servers) != 1 || cfg.Servers[0] != "nats://localhost:4222" {
			t.Errorf("servers %q", cfg.Servers)
		}
	})

	t.Run("every option", func(t *testing.T) {
		t.Parallel()
		cfg, err := parse(t, "tls://nats.example:4443/?subject_prefix=app.&timeout=750ms&max_pending=99"+
			"&creds=/etc/nats/user.creds&nkey=/etc/nats/seed.nk&tls_ca=/ca.pem&tls_cert=/c.pem&tls_key=/k.pem&name=relay-7&max_control_line=8192")
		if err != nil {
			t.Fatal(err)
		}
		want := nats.Config{
			Servers: []string{"tls://nats.example:4443"}, SubjectPrefix: "app.", Timeout: 750 * time.Millisecond,
			MaxPending: 99, CredsFile: "/etc/nats/user.creds", NkeySeedFile: "/etc/nats/seed.nk",
			TLSCA: "/ca.pem", TLSCert: "/c.pem", TLSKey: "/k.pem", Name: "relay-7", MaxControlLine: 8192,
		}
		if fmt.Sprintf("%+v", cfg) != fmt.Sprintf("%+v", want) {
			t.Errorf("got  %+v\nwant %+v", cfg, want)
		}
	})

	t.Run("token", func(t *testing.T) {
		t.Parallel()
		cfg, err := parse(t, "nats://s3cr3t-t0ken@h1:4222")
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Token != "s3cr3t-t0ken" || cfg.User != "" || cfg.Password != "" {
			t.Errorf("token %q user %q password %q, want only the token", cfg.Token, cfg.User, cfg.Password)
		}
		// An empty password is still a user and password.
		if cfg, _ := parse(t, "nats://alice:@h1:4222"); cfg.User != "alice" || cfg.Token != "" {
			t.Errorf("nats://alice:@h1: user %q token %q, want user alice", cfg.User, cfg.Token)
		}
	})

	t.Run("multiple hosts", func(t *testing.T) {
		t.Parallel()
		cfg, err := parse(t, "nats://h1:4222,h2:4222")
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"nats://h1:4222", "nats://h2:4222"}; strings.Join(cfg.Servers, " ") != strings.Join(want, " ") {
			t.Errorf("servers %q, want %q", cfg.Servers, want)
		}
	})

	t.Run("credentials", func(t *testing.T) {
		t.Parallel()
		cfg, err := parse(t, "nats://alice:s3cr3t-pw@h1:4222,h2:4222")
		if err != nil {
			t.Fatal(err)
		}
		if cfg.User != "alice" || cfg.Password != "s3cr3t-pw" {
			t.Errorf("user %q password %q, want alice / s3cr3t-pw", cfg.User, cfg.Password)
		}
		for _, s := range cfg.Servers {
			if strings.Contains(s, "s3cr3t-pw") || strings.Contains(s, "alice") {
				t.Errorf("server URL %q carries the credentials", s)
			}
		}
	})

	const secret = "s3cr3t-pw"
	bad := []struct {
		name, url, want string
	}{
		{"unknown option", "nats://alice:" + secret + "@h:4222?subjet_prefix=x", `unknown option "subjet_prefix"`},
		{"unknown option among known", "nats://h:4222?timeout=1s&bogus=1", `unknown option "bogus"`},
		{"timeout not a duration", "nats://alice:" + secret + "@h:4222?timeout=5", `timeout="5"`},
		{"timeout garbage", "nats://h:4222?timeout=soon", `timeout="soon"`},
		{"timeout zero", "nats://h:4222?timeout=0s", `timeout="0s"`},
		{"timeout negative", "nats://h:4222?timeout=-1s", `timeout="-1s"`},
		{"max_pending not a number", "nats://alice:" + secret + "@h:4222?max_pending=lots", `max_pending="lots"`},
		{"max_pending zero", "nats://h:4222?max_pending=0", `max_pending="0"`},
		{"max_pending negative", "nats://h:4222?max_pending=-5", `max_pending="-5"`},
		{"max_control_line not a number", "nats://alice:" + secret + "@h:4222?max_control_line=4k", `max_control_line="4k"`},
		{"max_control_line leaves no room", "nats://h:4222?max_control_line=64", `max_control_line="64"`},
		{"tls_cert without tls_key", "nats://alice:" + secret + "@h:4222?tls_cert=/c.pem", "tls_cert and tls_key"},
		{"tls_key without tls_cert", "tls://h:4222?tls_key=/k.pem", "tls_cert and tls_key"},
		{"missing host", "nats://alice:" + secret + "@/?timeout=1s", "has no host"},
		{"missing host no userinfo", "nats:///", "has no host"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := parse(t, tc.url)
			publishertest.RequireRefused(t, tc.url, err, tc.want, secret)
		})
	}

	t.Run("schemes registered", func(t *testing.T) {
		t.Parallel()
		for _, raw := range []string{"nats://h:4222", "tls://h:4222"} {
			if err := publisher.Check(raw); err != nil {
				t.Errorf("Check(%q): %v", raw, err)
			}
		}
	})
}

func TestOpenMultipleServersUsesEveryHost(t *testing.T) {
	t.Parallel()
	live := natstest.Start(t)
	dead := natstest.Start(t)
	dead.Stop()
	// The dead host is listed first: a driver that only used the first host
	// would never become healthy.
	deadHost := strings.TrimPrefix(dead.URL(), "nats://")
	liveHost := strings.TrimPrefix(live.URL(), "nats://")
	pub := openURL(t, "nats://"+deadHost+","+liveHost+"?timeout=2s")
	var last error
	eventually.True(t, waitLong, func() bool {
		last = pub.Ping(context.Background())
		return last == nil
	}, func() string { return fmt.Sprintf("Ping through the second host, last error: %v", last) })
}

func TestCredentialsAreUsedAndNeverRevealed(t *testing.T) {
	t.Parallel()
	const user, password = "relay", "s3cr3t-Pa55"
	srv := natstest.Start(t, func(o *server.Options) {
		o.Username = user
		o.Password = password
	})
	host := strings.TrimPrefix(srv.URL(), "nats://")

	good := openURL(t, "nats://"+user+":"+password+"@"+host+"?timeout=2s")
	var last error
	eventually.True(t, waitLong, func() bool {
		last = good.Ping(context.Background())
		return last == nil
	}, func() string { return fmt.Sprintf("Ping with the right credentials, last error: %v", last) })

	const wrong = "wr0ng-Pa55"
	badURL := "nats://" + user + ":" + wrong + "@" + host + "?timeout=2s"
	bad := openURL(t, badURL) // Open does not connect, so it cannot fail here
	eventually.True(t, waitLong, func() bool {
		last = bad.Ping(context.Background())
		return last != nil && strings.Contains(strings.ToLower(last.Error()), "authorization")
	}, func() string { return fmt.Sprintf("Ping to report the authorization failure, last error: %v", last) })
	errs := bad.Publish(context.Background(), []outbox.Event{event("orders.created", "k", "x", "")})
	for _, e := range append(errs, last) {
		if e == nil {
			t.Errorf("publish with wrong credentials succeeded")
			continue
		}
		if strings.Contains(e.Error(), wrong) || strings.Contains(e.Error(), password) {
			t.Errorf("error %q reveals a password", e)
		}
	}
}

// TestTokenIsUsedAndNeverRevealed checks that user info without a password
// authenticates as a token, as the nats CLI and nats.go read it, and that
// a wrong token is never quoted.
func TestTokenIsUsedAndNeverRevealed(t *testing.T) {
	t.Parallel()
	const token = "S3CRET-t0ken"
	srv := natstest.Start(t, func(o *server.Options) { o.Authorization = token })
	host := strings.TrimPrefix(srv.URL(), "nats://")

	good := openURL(t, "nats://"+token+"@"+host+"?timeout=2s")
	var last error
	eventually.True(t, waitLong, func() bool {
		last = good.Ping(context.Background())
		return last == nil
	}, func() string { return fmt.Sprintf("Ping with the right token, last error: %v", last) })

	const wrong = "wr0ng-t0ken"
	bad := openURL(t, "nats://"+wrong+"@"+host+"?timeout=2s")
	eventually.True(t, waitLong, func() bool {
		last = bad.Ping(context.Background())
		return last != nil && strings.Contains(strings.ToLower(last.Error()), "authorization")
	}, func() string { return fmt.Sprintf("Ping to report the authorization failure, last error: %v", last) })
	for _, e := range append(bad.Publish(context.Background(), []outbox.Event{event("orders.created", "k", "x", "")}), last) {
		if e == nil {
			t.Errorf("publish with a wrong token succeeded")
		} else if strings.Contains(e.Error(), wrong) || strings.Contains(e.Error(), token) {
			t.Errorf("error %q reveals a token", e)
		}
	}
}

func TestCloseIsIdempotentAndPingHealthy(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	pub, err := publisher.Open(context.Background(), srv.URL())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if err := pub.Ping(context.Background()); err != nil {
		t.Fatalf("Ping on a healthy server: %v", err)
	}
	for i := range 2 {
		if err := pub.Close(context.Background()); err != nil {
			t.Fatalf("Close #%d: %v", i+1, err)
		}
	}
	if err := pub.Ping(context.Background()); err == nil {
		t.Errorf("Ping after Close succeeded")
	}
	for i, err := range pub.Publish(context.Background(), []outbox.Event{event("orders.created", "k", "x", "")}) {
		if !publisher.IsUnavailable(err) {
			t.Errorf("Publish after Close, event %d: got %v, want Unavailable", i, err)
		}
	}
}

// TestOpenWithConfig opens the driver from a Config rather than a URL.
func TestOpenWithConfig(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	ordersStream(t, srv, jetstream.StreamConfig{})
	cfg, err := nats.ParseURL(mustParse(t, srv.URL()))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := nats.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("nats.Open: %v", err)
	}
	publishertest.RequireDelivered(t, publishertest.Publish(t, pub, event("orders.created", "k", "x", "")))
	if err := pub.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := pub.Ping(context.Background()); err == nil {
		t.Errorf("Ping after Close succeeded")
	}
}

func mustParse(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestOpenWhileServerDown(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	ordersStream(t, srv, jetstream.StreamConfig{})
	srv.Stop()

	pub := open(t, srv, "?timeout=2s")
	ctx := context.Background()
	if err := pub.Ping(ctx); err == nil {
		t.Fatalf("Ping succeeded with no server")
	}
	e := event("orders.created", "k", "x", "")
	for i, err := range pub.Publish(ctx, []outbox.Event{e}) {
		if !publisher.IsUnavailable(err) {
			t.Errorf("Publish with no server, event %d: got %v, want Unavailable", i, err)
		}
	}

	srv.Restart()
	var last error
	eventually.True(t, waitLong, func() bool {
		last = pub.Ping(ctx)
		return last == nil
	}, func() string { return fmt.Sprintf("Ping once the server is up, last error: %v", last) })
	publishertest.RequireDelivered(t, publishertest.Publish(t, pub, e))
	if got := storedIDs(stored(t, srv, "ORDERS")); len(got) != 1 || got[0] != e.ID.String() {
		t.Errorf("stream holds %v, want %s", got, e.ID)
	}
}
