package nats_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/natstest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/publishertest"
)

// goodBatch is n good events for the ORDERS stream, over a few keys.
func goodBatch(n int) []outbox.Event {
	batch := make([]outbox.Event, n)
	for i := range batch {
		batch[i] = event("orders.created", fmt.Sprintf("k%d", i%7), fmt.Sprintf("good %d", i), `{"tenant":"acme"}`)
	}
	return batch
}

// requireStored checks that the ORDERS stream holds exactly want, in order.
func requireStored(t *testing.T, srv *natstest.Server, want []outbox.Event) {
	t.Helper()
	got := storedIDs(stored(t, srv, "ORDERS"))
	ids := make([]string, len(want))
	for i, e := range want {
		ids[i] = e.ID.String()
	}
	if strings.Join(got, ",") != strings.Join(ids, ",") {
		t.Fatalf("stream holds %d messages, want the %d good events in order", len(got), len(ids))
	}
}

// TestHostileEventAmongManyGoodOnes mixes one event that breaks a limit of
// NATS into a batch of good ones: the good ones are stored, the hostile one
// goes DEAD with an error naming the limit, and the publisher keeps working.
// Before these limits were checked, the long subject made the server close
// the connection for good, and the others were retried forever.
func TestHostileEventAmongManyGoodOnes(t *testing.T) {
	t.Parallel()
	big := func(n int) string { return strings.Repeat("v", n) }
	cases := []struct {
		name string
		bad  outbox.Event
		want []string
	}{
		{"event type over the control line", event("orders."+strings.Repeat("x", 5000), "k", "{}", ""),
			[]string{"event_type is 5007 bytes", "4032", "max_control_line"}},
		{"event type just over the control line", event("orders."+strings.Repeat("x", 4026), "k", "{}", ""),
			[]string{"event_type is 4033 bytes", "max_control_line"}},
		{"headers over 64 KiB", event("orders.created", "k", "{}", `{"big":"`+big(70000)+`"}`),
			[]string{"headers are 70", "65535", "JetStream"}},
		{"many headers over 64 KiB", event("orders.created", "k", "{}", manyHeaders(700, 100)),
			[]string{"headers are", "65535"}},
		{"partition key over 64 KiB", event("orders.created", big(66000), "{}", ""),
			[]string{"headers are", "65535"}},
		{"header name not ASCII", event("orders.created", "k", "{}", `{"naïve":"v"}`),
			[]string{`header "naïve"`, "printable ASCII"}},
		{"header name with slash", event("orders.created", "k", "{}", `{"a/b":"v"}`),
			[]string{`header "a/b"`, "printable ASCII"}},
		{"header name with parenthesis", event("orders.created", "k", "{}", `{"f(x)":"v"}`),
			[]string{`header "f(x)"`, `"()/,:;<=>?@[\]{}`}},
		{"message over max_payload", event("orders.created", "k", big(1100*1024), ""),
			[]string{"max_payload", "1048576"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := natstest.Start(t)
			ordersStream(t, srv, jetstream.StreamConfig{})
			pub := open(t, srv, "?timeout=2s")

			good := goodBatch(200)
			batch := append(append(append([]outbox.Event{}, good[:100]...), tc.bad), good[100:]...)
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

			next := goodBatch(20)
			publishertest.RequireDelivered(t, publishertest.Publish(t, pub, next...))
			requireStored(t, srv, append(good, next...))
		})
	}
}

// manyHeaders is a headers column of n headers of size bytes each.
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

// TestLimitsAreExact publishes events right at each limit, which must be
// stored: a limit checked too strictly would send good events DEAD.
func TestLimitsAreExact(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t, func(o *server.Options) { o.MaxPayload = 256 * 1024 })
	ordersStream(t, srv, jetstream.StreamConfig{})
	pub := open(t, srv, "")

	longest := event("orders."+strings.Repeat("x", 4032-len("orders.")), "k", "{}", "")
	// The driver's own headers (Nats-Msg-Id, X-Event-ID, X-Event-Type,
	// X-Partition-Key) take part of the 65535 bytes; fill the rest.
	fill := event("orders.created", "k", "{}", "")
	own := len("NATS/1.0\r\n") + len("\r\n") +
		len("Nats-Msg-Id: \r\n") + 36 + len("X-Event-ID: \r\n") + 36 +
		len("X-Event-Type: \r\n") + len(fill.Type) + len("X-Partition-Key: \r\n") + 1
	fill.Headers = []byte(`{"big":"` + strings.Repeat("v", 65535-own-len("big: \r\n")) + `"}`)
	fullPayload := event("orders.created", "", "", "")
	fullPayload.Payload = make([]byte, 256*1024-fullHeaderSize(fullPayload))
	publishertest.RequireDelivered(t, publishertest.Publish(t, pub, longest, fill, fullPayload))

	over := event(fill.Type, fill.PartitionKey, "{}", `{"big":"`+strings.Repeat("v", 65535-own-len("big: \r\n")+1)+`"}`)
	if err := publishertest.Publish(t, pub, over)[0]; !publisher.IsPermanent(err) || !strings.Contains(err.Error(), "65536 bytes") {
		t.Errorf("headers one byte over: %v, want permanent naming 65536 bytes", err)
	}
}

// fullHeaderSize is the size of the header block the driver sends for e,
// which carries no row headers and no key.
func fullHeaderSize(e outbox.Event) int {
	return len("NATS/1.0\r\n") + len("\r\n") + len("Nats-Msg-Id: \r\n") + 36 + len("X-Event-ID: \r\n") + 36 +
		len("X-Event-Type: \r\n") + len(e.Type)
}

// TestServerClosedConnectionIsReopened points the driver at a server with a
// stricter max_control_line than it assumes, so a long subject passes the
// driver's check and the server closes the connection for good, as it did
// for every long subject before. The batch is Unavailable with the server's
// reason, and the driver opens a new connection by itself: Ping turns
// healthy and the next publish goes through, with nothing restarted.
func TestServerClosedConnectionIsReopened(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t, func(o *server.Options) { o.MaxControlLine = 1024 })
	ordersStream(t, srv, jetstream.StreamConfig{})
	pub := open(t, srv, "?timeout=3s")
	host := strings.TrimPrefix(srv.URL(), "nats://")

	poison := event("orders."+strings.Repeat("x", 2000), "k", "{}", "")
	batch := append(goodBatch(3), poison)
	errs := publishertest.Publish(t, pub, batch...)
	if !publisher.IsUnavailable(errs[3]) {
		t.Fatalf("event the server closed the connection over: %v, want unavailable", errs[3])
	}
	for _, w := range []string{"maximum control line exceeded", host} {
		if !strings.Contains(errs[3].Error(), w) {
			t.Errorf("error %q does not say %q", errs[3], w)
		}
	}

	var last error
	eventually.True(t, 5*time.Second, func() bool {
		last = pub.Ping(context.Background())
		return last == nil
	}, func() string { return fmt.Sprintf("Ping to succeed on a new connection, last error: %v", last) })
	next := goodBatch(5)
	publishertest.RequireDelivered(t, publishertest.Publish(t, pub, next...))
	if n := srv.Clients("outbox-relay"); n != 1 {
		t.Errorf("server sees %d connections of the driver, want 1", n)
	}

	// The limit is an option: told the server's value, the driver refuses
	// the event itself and the connection stays up.
	strict := open(t, srv, "?max_control_line=1024")
	if err := publishertest.Publish(t, strict, poison)[0]; !publisher.IsPermanent(err) || !strings.Contains(err.Error(), "960 bytes") {
		t.Errorf("with max_control_line=1024: %v, want permanent naming the 960-byte subject limit", err)
	}
	publishertest.RequireDelivered(t, publishertest.Publish(t, strict, goodBatch(1)...))
}

// TestConcurrentPublishesWhileTheConnectionIsReopened has several batches in
// flight while the server keeps closing the connection: every good event
// gets through in the end, the driver keeps one connection, and Close ends
// it all (go test -race checks the rest).
func TestConcurrentPublishesWhileTheConnectionIsReopened(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t, func(o *server.Options) { o.MaxControlLine = 1024 })
	ordersStream(t, srv, jetstream.StreamConfig{Duplicates: time.Hour})
	pub, err := publisher.Open(context.Background(), srv.URL()+"?timeout=2s")
	if err != nil {
		t.Fatal(err)
	}

	const workers, perWorker = 4, 5
	var wg sync.WaitGroup
	failures := make(chan error, workers*perWorker)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perWorker {
				batch := goodBatch(20)
				deadline := time.Now().Add(30 * time.Second)
				for {
					errs := pub.Publish(context.Background(), batch)
					failed := batch[:0:0]
					for i, err := range errs {
						if err != nil {
							if !publisher.IsUnavailable(err) {
								failures <- fmt.Errorf("worker %d: %v", w, err)
								return
							}
							failed = append(failed, batch[i])
						}
					}
					if len(failed) == 0 {
						break
					}
					if time.Now().After(deadline) {
						failures <- fmt.Errorf("worker %d: %d events still failing after 30s, first: %v", w, len(failed), errs[0])
						return
					}
					batch = failed
				}
			}
		}()
	}
	// Meanwhile, poison closes the connection again and again, each time
	// once the driver has opened a new one.
	for range 3 {
		var last error
		eventually.True(t, 10*time.Second, func() bool {
			last = pub.Ping(context.Background())
			return last == nil
		}, func() string { return fmt.Sprintf("Ping to succeed on a new connection, last error: %v", last) })
		pub.Publish(context.Background(), []outbox.Event{event("orders."+strings.Repeat("x", 2000), "k", "{}", "")})
	}
	wg.Wait()
	close(failures)
	for err := range failures {
		t.Error(err)
	}
	if got, want := natstest.Count(t, mustStream(t, srv)), uint64(workers*perWorker*20); got != want {
		t.Errorf("stream holds %d messages, want %d", got, want)
	}
	if err := pub.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := pub.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	eventually.True(t, 5*time.Second, func() bool { return srv.Clients("outbox-relay") == 0 },
		func() string {
			return fmt.Sprintf("%d connections of the driver left after Close", srv.Clients("outbox-relay"))
		})
	if err := pub.Ping(context.Background()); err == nil {
		t.Error("Ping after Close succeeded: Close must be final")
	}
}

func mustStream(t *testing.T, srv *natstest.Server) jetstream.Stream {
	t.Helper()
	_, js := srv.Connect(t)
	st, err := js.Stream(context.Background(), "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestKickedConnectionRecovers has the server drop the driver's connection
// while it stays up: Ping answers truthfully within seconds and publishing
// goes on.
func TestKickedConnectionRecovers(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	ordersStream(t, srv, jetstream.StreamConfig{})
	pub := open(t, srv, "?timeout=2s")
	publishertest.RequireDelivered(t, publishertest.Publish(t, pub, goodBatch(1)...))

	srv.Kick("outbox-relay")
	var last error
	eventually.True(t, 5*time.Second, func() bool {
		last = pub.Ping(context.Background())
		return last == nil
	}, func() string { return fmt.Sprintf("Ping to succeed after the kick, last error: %v", last) })
	publishertest.RequireDelivered(t, publishertest.Publish(t, pub, goodBatch(3)...))
}

// TestNoAckStreamPausesAndSaysWhy publishes to a stream created with no
// acknowledgements: nothing can be confirmed there, so the relay must pause,
// and the error and Ping must name the stream and its setting until it is
// fixed.
func TestNoAckStreamPausesAndSaysWhy(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	ordersStream(t, srv, jetstream.StreamConfig{NoAck: true})
	pub := open(t, srv, "?timeout=1s")
	host := strings.TrimPrefix(srv.URL(), "nats://")

	wants := []string{`stream "ORDERS"`, "no_ack", host}
	for i, err := range publishertest.Publish(t, pub, goodBatch(3)...) {
		if !publisher.IsUnavailable(err) {
			t.Fatalf("event %d: %v, want unavailable", i, err)
		}
		for _, w := range wants {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("event %d: %q does not say %q", i, err, w)
			}
		}
	}
	for range 2 { // and keeps saying so
		err := pub.Ping(context.Background())
		if err == nil {
			t.Fatal("Ping succeeded while the stream cannot acknowledge")
		}
		for _, w := range wants {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Ping: %q does not say %q", err, w)
			}
		}
	}

	_, js := srv.Connect(t)
	if _, err := js.UpdateStream(context.Background(), jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatalf("turn acks on: %v", err)
	}
	if err := pub.Ping(context.Background()); err != nil {
		t.Fatalf("Ping once the stream acknowledges: %v", err)
	}
	publishertest.RequireDelivered(t, publishertest.Publish(t, pub, goodBatch(2)...))
}

// TestPingReturnsWithinTheCallersDeadline has JetStream's API swallowed by
// a subscriber that never answers: Ping must still answer within a context
// shorter than the URL's timeout, as /readyz's budget needs.
func TestPingReturnsWithinTheCallersDeadline(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t, func(o *server.Options) { o.JetStream = false })
	nc, _ := srv.Connect(t)
	sub, err := nc.Subscribe("$JS.API.>", func(*natsgo.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	const timeout = 20 * time.Second
	pub := open(t, srv, "?timeout="+timeout.String())
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	err = pub.Ping(ctx)
	if took := time.Since(began); took > timeout/2 {
		t.Errorf("Ping with a 300ms context took %s (timeout=%s)", took, timeout)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), strings.TrimPrefix(srv.URL(), "nats://")) {
		t.Errorf("Ping: %v, want context.DeadlineExceeded naming the server", err)
	}
}
