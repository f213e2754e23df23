package amqp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/amqptest"
	"github.com/outbox-relay/relay/internal/tcpproxy"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/publishertest"
)

// waitLong bounds every eventually-wait: reconnecting takes a dial and a
// few round trips, after up to redialInterval.
const waitLong = 20 * time.Second

// exchangeWithQueue declares a private topic exchange and a queue bound to
// it for one event type, both deleted at the end of the test.
func exchangeWithQueue(t *testing.T) (exchange, eventType string) {
	t.Helper()
	ch := amqptest.Channel(t)
	exchange = amqptest.Exchange(t, ch, "topic")
	eventType = "orders." + strings.ReplaceAll(uuid.NewString(), "-", "")
	amqptest.BoundQueue(t, ch, exchange, eventType)
	return exchange, eventType
}

func newEvent(typ, key, payload, headers string) outbox.Event {
	return outbox.Event{
		ID:           uuid.Must(uuid.NewV7()),
		Type:         typ,
		PartitionKey: key,
		Payload:      []byte(payload),
		Headers:      []byte(headers),
		CreatedAt:    time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC),
	}
}

func requireUnavailable(t *testing.T, errs []error, mention string) {
	t.Helper()
	for i, err := range errs {
		switch {
		case !publisher.IsUnavailable(err) || publisher.IsPermanent(err):
			t.Fatalf("event %d: %v, want an unavailable error", i, err)
		case !strings.Contains(err.Error(), mention):
			t.Fatalf("event %d: %q does not mention %q", i, err, mention)
		}
	}
}

func TestMessageCarriesEventFields(t *testing.T) {
	t.Parallel()
	exchange, typ := exchangeWithQueue(t)
	p := openPublisher(t, amqptest.DriverURL("", "exchange="+exchange))

	withKey := newEvent(typ, "customer-7", `{"id":1}`,
		`{"Content-Type":"application/json","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","tenant":"acme","n":42,"yes":true,"nothing":null}`)
	noKey := newEvent(typ, "", "\x00\xffbinary", "")
	publishertest.RequireDelivered(t, publishertest.Publish(t, p, withKey, noKey))

	got := amqptest.Drain(t, typ, 2)
	if len(got) != 2 {
		t.Fatalf("queue holds %d messages, want 2", len(got))
	}
	for i, e := range []outbox.Event{withKey, noKey} {
		d := got[i]
		if d.Exchange != exchange || d.RoutingKey != typ {
			t.Errorf("message %d went to exchange %q key %q, want %q %q", i, d.Exchange, d.RoutingKey, exchange, typ)
		}
		if d.DeliveryMode != amqp091.Persistent {
			t.Errorf("message %d delivery mode %d, want persistent (2)", i, d.DeliveryMode)
		}
		if d.MessageId != e.ID.String() || d.Type != typ {
			t.Errorf("message %d message_id %q type %q, want %q %q", i, d.MessageId, d.Type, e.ID, typ)
		}
		if !d.Timestamp.Equal(e.CreatedAt) {
			t.Errorf("message %d timestamp %s, want the event's created_at %s", i, d.Timestamp, e.CreatedAt)
		}
		if string(d.Body) != string(e.Payload) {
			t.Errorf("message %d body %q, want %q", i, d.Body, e.Payload)
		}
		if d.Headers[outbox.HeaderEventID] != e.ID.String() || d.Headers[outbox.HeaderEventType] != typ {
			t.Errorf("message %d headers %v lack the event id and type", i, d.Headers)
		}
	}

	h := got[0].Headers
	want := map[string]string{
		outbox.HeaderPartitionKey: "customer-7",
		outbox.HeaderTraceparent:  "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"tenant":                  "acme",
		"n":                       "42",
		"yes":                     "true",
	}
	for k, v := range want {
		if h[k] != v {
			t.Errorf("header %s = %v, want %q", k, h[k], v)
		}
	}
	if got[0].ContentType != "application/json" {
		t.Errorf("content_type %q, want the row's Content-Type header", got[0].ContentType)
	}
	if _, dup := h["Content-Type"]; dup {
		t.Errorf("Content-Type is repeated as a header: %v", h)
	}
	if _, ok := h["nothing"]; ok {
		t.Errorf("null header sent: %v", h)
	}
	// The row's five non-null headers other than Content-Type, plus three.
	if len(h) != len(want)+2 {
		t.Errorf("headers %v, want exactly the row's and the driver's", h)
	}
	if _, ok := got[1].Headers[outbox.HeaderPartitionKey]; ok || got[1].ContentType != "" {
		t.Errorf("keyless event carries %s or a content type: %v %q", outbox.HeaderPartitionKey, got[1].Headers, got[1].ContentType)
	}
}

// TestReturnsReachTheirOwnBatch publishes batches with unroutable events
// from many goroutines at once over the one channel: each batch must get
// exactly its own events' returns.
func TestReturnsReachTheirOwnBatch(t *testing.T) {
	t.Parallel()
	exchange, typ := exchangeWithQueue(t)
	p := openPublisher(t, amqptest.DriverURL("", "exchange="+exchange))

	const batches, size = 8, 60
	var wg sync.WaitGroup
	delivered := make(chan int, batches)
	for b := range batches {
		wg.Add(1)
		go func() {
			defer wg.Done()
			batch := make([]outbox.Event, size)
			for i := range batch {
				batch[i] = newEvent(typ, fmt.Sprint(b), "x", "")
				if (i+b)%5 == 0 {
					batch[i].Type = "nowhere." + typ
				}
			}
			errs := p.Publish(context.Background(), batch)
			ok := 0
			for i, err := range errs {
				unroutable := batch[i].Type != typ
				returned := publisher.IsPermanent(err) && strings.Contains(err.Error(), "no queue is bound")
				switch {
				case unroutable && !returned:
					t.Errorf("batch %d event %d is unroutable but got %v", b, i, err)
				case !unroutable && err != nil:
					t.Errorf("batch %d event %d: %v", b, i, err)
				case !unroutable:
					ok++
				}
			}
			delivered <- ok
		}()
	}
	wg.Wait()
	close(delivered)
	total := 0
	for n := range delivered {
		total += n
	}
	if got := len(amqptest.Drain(t, typ, total)); got != total {
		t.Errorf("queue holds %d messages, want the %d routable ones", got, total)
	}
}

func TestNackIsRetryable(t *testing.T) {
	t.Parallel()
	ch := amqptest.Channel(t)
	exchange := amqptest.Exchange(t, ch, "topic")
	// A full queue that rejects new messages makes RabbitMQ nack them.
	typ := "full." + strings.ReplaceAll(uuid.NewString(), "-", "")
	amqptest.Queue(t, ch, typ, amqp091.Table{"x-max-length": 1, "x-overflow": "reject-publish"})
	amqptest.Bind(t, ch, typ, exchange, typ)
	p := openPublisher(t, amqptest.DriverURL("", "exchange="+exchange))

	errs := publishertest.Publish(t, p, newEvent(typ, "k", "1", ""), newEvent(typ, "k", "2", ""), newEvent(typ, "k", "3", ""))
	if errs[0] != nil {
		t.Fatalf("first event into an empty queue: %v", errs[0])
	}
	for i, err := range errs[1:] {
		switch {
		case err == nil:
			t.Errorf("event %d into a full queue was delivered", i+1)
		case publisher.IsPermanent(err) || publisher.IsUnavailable(err):
			t.Errorf("event %d: nack classified as permanent or unavailable: %v", i+1, err)
		case !strings.Contains(err.Error(), "nack"):
			t.Errorf("event %d: %q does not say the broker nacked it", i+1, err)
		}
	}
	// The channel survives a nack.
	if _, err := ch.QueuePurge(typ, false); err != nil {
		t.Fatal(err)
	}
	publishertest.RequireDelivered(t, publishertest.Publish(t, p, newEvent(typ, "k", "4", "")))
}

func TestMissingExchangePausesUntilItExists(t *testing.T) {
	t.Parallel()
	exchange := "test-missing-" + uuid.NewString()
	p := openPublisher(t, amqptest.DriverURL("", "exchange="+exchange))
	typ := "orders.created"

	requireUnavailable(t, publishertest.Publish(t, p, newEvent(typ, "k", "1", ""), newEvent(typ, "k", "2", "")), "does not exist")
	if err := p.Ping(context.Background()); err == nil || !strings.Contains(err.Error(), "declare=true") {
		t.Fatalf("Ping with the exchange missing: %v, want an error that says how to fix it", err)
	}

	ch := amqptest.Channel(t)
	declare := func() {
		if err := ch.ExchangeDeclare(exchange, "topic", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	declare()
	t.Cleanup(func() { amqptest.DeleteExchange(t, exchange) })
	amqptest.BoundQueue(t, ch, exchange, typ+"."+exchange)
	typ += "." + exchange
	waitPing(t, p)
	publishertest.RequireDelivered(t, publishertest.Publish(t, p, newEvent(typ, "k", "3", "")))

	// Deleted under a live channel: RabbitMQ closes the channel when the
	// next publish reaches the missing exchange.
	if err := ch.ExchangeDelete(exchange, false, false); err != nil {
		t.Fatal(err)
	}
	requireUnavailable(t, publishertest.Publish(t, p, newEvent(typ, "k", "4", "")), "does not exist")
	declare()
	if err := ch.QueueBind(typ, typ, exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	waitPing(t, p)
	publishertest.RequireDelivered(t, publishertest.Publish(t, p, newEvent(typ, "k", "5", "")))
	if got := amqptest.Drain(t, typ, 2); len(got) != 2 || string(got[0].Body) != "3" || string(got[1].Body) != "5" {
		t.Errorf("queue holds %d messages, want events 3 and 5", len(got))
	}
}

func waitPing(t *testing.T, p publisher.Publisher) {
	t.Helper()
	var last error
	eventually.True(t, waitLong, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		last = p.Ping(ctx)
		return last == nil
	}, func() string { return fmt.Sprintf("Ping to succeed, last error: %v", last) })
}

func TestDeclareCreatesADurableExchange(t *testing.T) {
	t.Parallel()
	exchange := "test-declared-" + uuid.NewString()
	t.Cleanup(func() { amqptest.DeleteExchange(t, exchange) })
	p := openPublisher(t, amqptest.DriverURL("", "exchange="+exchange+"&declare=true&exchange_type=direct"))
	if err := p.Ping(context.Background()); err != nil {
		t.Fatalf("Ping: %v", err)
	}

	// Redeclaring with the same properties succeeds only if they match.
	ch := amqptest.Channel(t)
	if err := ch.ExchangeDeclare(exchange, "direct", true, false, false, false, nil); err != nil {
		t.Fatalf("the exchange is not a durable direct exchange: %v", err)
	}
	typ := "orders.created"
	q := amqptest.BoundQueue(t, ch, exchange, typ+"-"+exchange)
	publishertest.RequireDelivered(t, publishertest.Publish(t, p, newEvent(q, "k", "1", "")))
	if got := amqptest.Drain(t, q, 1); len(got) != 1 {
		t.Fatalf("queue holds %d messages, want 1", len(got))
	}

	// An existing exchange of another type cannot be declared: Ping says why.
	other := openPublisher(t, amqptest.DriverURL("", "exchange="+exchange+"&declare=true&exchange_type=fanout"))
	if err := other.Ping(context.Background()); err == nil || !strings.Contains(err.Error(), "inequivalent") {
		t.Errorf("Ping declaring a fanout over a direct exchange: %v, want RabbitMQ's refusal", err)
	}
}

func TestDefaultExchangeRoutesToTheQueueNamedByTheEventType(t *testing.T) {
	t.Parallel()
	queue := amqptest.Queue(t, amqptest.Channel(t), "", nil)
	p := openPublisher(t, amqptest.DriverURL("", "exchange="))
	if err := p.Ping(context.Background()); err != nil {
		t.Fatalf("Ping: %v", err)
	}

	errs := publishertest.Publish(t, p, newEvent(queue, "k", "1", ""), newEvent("no-such-queue-"+queue, "k", "2", ""))
	if errs[0] != nil {
		t.Errorf("event for queue %s: %v", queue, errs[0])
	}
	if !publisher.IsPermanent(errs[1]) || !strings.Contains(errs[1].Error(), "no queue is bound") {
		t.Errorf("event for a missing queue: %v, want permanent", errs[1])
	}
	if got := amqptest.Drain(t, queue, 1); len(got) != 1 {
		t.Errorf("queue holds %d messages, want 1", len(got))
	}
}

func TestOpenWhileBrokerDownThenRecovers(t *testing.T) {
	t.Parallel()
	exchange, typ := exchangeWithQueue(t)
	proxy := tcpproxy.Start(t, amqptest.Host(t))
	proxy.Down()

	p := openPublisher(t, amqptest.DriverURL(proxy.Addr(), "timeout=2s&exchange="+exchange))
	if err := p.Ping(context.Background()); err == nil {
		t.Fatal("Ping succeeded with the broker unreachable")
	}
	requireUnavailable(t, publishertest.Publish(t, p, newEvent(typ, "k", "1", "")), "connect to RabbitMQ")

	proxy.Up()
	waitPing(t, p)
	publishertest.RequireDelivered(t, publishertest.Publish(t, p, newEvent(typ, "k", "2", "")))
	if got := amqptest.Drain(t, typ, 1); len(got) != 1 || string(got[0].Body) != "2" {
		t.Errorf("queue holds %d messages, want only event 2", len(got))
	}
}

func TestCredentialsAreNeverRevealed(t *testing.T) {
	t.Parallel()
	const wrong = "wr0ng-Pa55"
	u, _ := url.Parse(amqptest.URL())
	u.User = url.UserPassword("guest", wrong)
	p := openPublisher(t, u.String()+"?timeout=2s")

	err := p.Ping(context.Background())
	if err == nil || !strings.Contains(err.Error(), "username or password not allowed") {
		t.Fatalf("Ping with a wrong password: %v, want the refusal", err)
	}
	errs := publishertest.Publish(t, p, newEvent("orders.created", "k", "1", ""))
	requireUnavailable(t, errs, "connect to RabbitMQ")
	for _, e := range append(errs, err) {
		if strings.Contains(e.Error(), wrong) {
			t.Errorf("error %q reveals the password", e)
		}
	}
}

// TestServerRefusalOfALargeMessage checks how a channel closed for a message
// over the server's max_message_size is read. The limit is a server-wide
// setting, so the refusal is built here rather than provoked on the shared
// server.
func TestServerRefusalOfALargeMessage(t *testing.T) {
	t.Parallel()
	p, err := Open(context.Background(), Config{MaxMessageSize: MaxMessageSizeDefault})
	if err != nil {
		t.Fatal(err)
	}
	refusal := &amqp091.Error{Code: amqp091.PreconditionFailed, Server: true,
		Reason: "PRECONDITION_FAILED - message size 2048 is larger than configured max size 1024"}

	big := newEvent("t", "k", strings.Repeat("x", 2048), "")
	if err := p.channelClosed(refusal, &big); !publisher.IsPermanent(err) || !strings.Contains(err.Error(), "too large") {
		t.Errorf("the oversized event: %v, want permanent and too large", err)
	}
	small := newEvent("t", "k", "x", "")
	if err := p.channelClosed(refusal, &small); !publisher.IsUnavailable(err) || publisher.IsPermanent(err) {
		t.Errorf("an event that shared the closed channel: %v, want unavailable", err)
	}
	// The limit is learned: the next oversized event is refused before it
	// can close the channel.
	mid := newEvent("t", "k", strings.Repeat("x", 1500), "")
	if _, err := p.message(&mid, 0); err == nil || !strings.Contains(err.Error(), "too large") {
		t.Errorf("an event over the learned limit: %v, want too large", err)
	}
	if _, err := p.message(&small, 0); err != nil {
		t.Errorf("a small event: %v", err)
	}
}

// TestChannelCloseClassification covers the channel closes that name no
// event and that the shared server cannot be made to send.
func TestChannelCloseClassification(t *testing.T) {
	t.Parallel()
	p, err := Open(context.Background(), Config{Exchange: "events", MaxMessageSize: MaxMessageSizeDefault})
	if err != nil {
		t.Fatal(err)
	}
	e := newEvent("t", "k", "x", "")
	for _, tc := range []struct {
		name   string
		reason *amqp091.Error
		want   string // "unavailable", "dropped" or "retryable"
	}{
		// Dropped: the engine checks the broker; down, it pauses; up, it
		// sends the batch again in halves until an event that closes the
		// channel every time stands alone and pays with an attempt.
		{"closed by us", nil, "dropped"},
		{"connection lost", &amqp091.Error{Code: amqp091.FrameError, Reason: "EOF"}, "dropped"},
		{"broker shutting down", &amqp091.Error{Code: amqp091.ConnectionForced, Reason: "CONNECTION_FORCED - shutdown", Server: true}, "dropped"},
		{"unknown message refusal", &amqp091.Error{Code: amqp091.PreconditionFailed, Reason: "PRECONDITION_FAILED - invalid message", Server: true, Recover: true}, "dropped"},
		// Configuration, the same for every event: pause.
		{"missing exchange", &amqp091.Error{Code: amqp091.NotFound, Reason: "NOT_FOUND - no exchange 'events' in vhost '/'", Server: true, Recover: true}, "unavailable"},
		{"no write permission", &amqp091.Error{Code: amqp091.AccessRefused, Reason: "ACCESS_REFUSED - access to exchange 'events' refused", Server: true, Recover: true}, "unavailable"},
	} {
		err := p.channelClosed(tc.reason, &e)
		got := "retryable"
		switch {
		case err == nil:
			got = "delivered"
		case publisher.IsPermanent(err):
			got = "permanent"
		case publisher.IsDropped(err):
			got = "dropped"
		case publisher.IsUnavailable(err):
			got = "unavailable"
		}
		if got != tc.want {
			t.Errorf("%s: %v is %s, want %s", tc.name, err, got, tc.want)
		}
	}
}

func TestInternalExchangePausesTheRelay(t *testing.T) {
	t.Parallel()
	exchange := "test-internal-" + uuid.NewString()
	ch := amqptest.Channel(t)
	if err := ch.ExchangeDeclare(exchange, "topic", true, false, true, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { amqptest.DeleteExchange(t, exchange) })
	p := openPublisher(t, amqptest.DriverURL("", "exchange="+exchange))
	requireUnavailable(t, publishertest.Publish(t, p, newEvent("orders.created", "k", "1", "")), "refused to take messages")
}

func TestCloseIsFinal(t *testing.T) {
	t.Parallel()
	exchange, typ := exchangeWithQueue(t)
	p, err := publisher.Open(context.Background(), amqptest.DriverURL("", "exchange="+exchange))
	if err != nil {
		t.Fatal(err)
	}
	publishertest.RequireDelivered(t, publishertest.Publish(t, p, newEvent(typ, "k", "1", "")))
	s := p.(*Publisher).sess
	for i := range 2 {
		if err := p.Close(context.Background()); err != nil {
			t.Fatalf("Close #%d: %v", i+1, err)
		}
	}
	if !s.conn.IsClosed() {
		t.Error("Close left the connection open")
	}
	select {
	case <-s.gone:
	default:
		t.Error("Close returned before the session's goroutine ended")
	}
	if err := p.Ping(context.Background()); err == nil {
		t.Error("Ping after Close succeeded")
	}
	requireUnavailable(t, publishertest.Publish(t, p, newEvent(typ, "k", "2", "")), "closed")
	if got := amqptest.Drain(t, typ, 1); len(got) != 1 {
		t.Errorf("queue holds %d messages, want 1: a publish after Close reconnected", len(got))
	}
}

func TestParseURL(t *testing.T) {
	t.Parallel()
	parse := func(t *testing.T, raw string) (Config, error) {
		t.Helper()
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatalf("url.Parse(%q): %v", raw, err)
		}
		return ParseURL(u)
	}

	t.Run("defaults", func(t *testing.T) {
		t.Parallel()
		cfg, err := parse(t, "amqp://rabbit")
		if err != nil {
			t.Fatal(err)
		}
		want := Config{Host: "rabbit:5672", User: "guest", Password: "guest", Vhost: "/", Exchange: ExchangeDefault,
			ExchangeType: ExchangeTypeDefault, Timeout: TimeoutDefault, Heartbeat: HeartbeatDefault,
			MaxMessageSize: MaxMessageSizeDefault, Name: NameDefault}
		if fmt.Sprintf("%+v", cfg) != fmt.Sprintf("%+v", want) {
			t.Errorf("got  %+v\nwant %+v", cfg, want)
		}
	})

	t.Run("every option", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		cfg, err := parse(t, "amqps://relay:s3cr3t@rabbit.example:5700/prod?exchange=events&exchange_type=direct&declare=true"+
			"&timeout=750ms&heartbeat=30s&max_message_size=1048576&name=relay-7"+
			"&tls_ca="+dir+"/ca.pem&tls_cert=/c.pem&tls_key=/k.pem&tls_insecure=true")
		if err != nil {
			t.Fatal(err)
		}
		want := Config{TLS: true, Host: "rabbit.example:5700", User: "relay", Password: "s3cr3t", Vhost: "prod",
			Exchange: "events", ExchangeType: "direct", Declare: true, Timeout: 750 * time.Millisecond,
			Heartbeat: 30 * time.Second, MaxMessageSize: 1 << 20, Name: "relay-7",
			TLSCA: dir + "/ca.pem", TLSCert: "/c.pem", TLSKey: "/k.pem", TLSInsecure: true}
		if fmt.Sprintf("%+v", cfg) != fmt.Sprintf("%+v", want) {
			t.Errorf("got  %+v\nwant %+v", cfg, want)
		}
	})

	for _, tc := range []struct{ url, host, vhost, exchange string }{
		{"amqp://h/", "h:5672", "/", ExchangeDefault},
		{"amqp://h/%2f", "h:5672", "/", ExchangeDefault},
		{"amqp://h/%2Fteam", "h:5672", "/team", ExchangeDefault},
		{"amqps://h", "h:5671", "/", ExchangeDefault},
		{"amqp://[::1]:5673/v?exchange=", "[::1]:5673", "v", ""},
	} {
		t.Run("address "+tc.url, func(t *testing.T) {
			t.Parallel()
			cfg, err := parse(t, tc.url)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Host != tc.host || cfg.Vhost != tc.vhost || cfg.Exchange != tc.exchange {
				t.Errorf("host %q vhost %q exchange %q, want %q %q %q", cfg.Host, cfg.Vhost, cfg.Exchange, tc.host, tc.vhost, tc.exchange)
			}
		})
	}

	const secret = "s3cr3t-pw"
	bad := []struct{ name, url, want string }{
		{"unknown option", "amqp://u:" + secret + "@h?exchang=x", `unknown option "exchang" (known: exchange, exchange_type, declare, timeout`},
		{"bad exchange name", "amqp://u:" + secret + "@h?exchange=a%20b", `exchange="a b"`},
		{"declare not a bool", "amqp://h?declare=yes-please", `declare="yes-please"`},
		{"declare the default exchange", "amqp://h?exchange=&declare=true", "declare=true needs a named exchange"},
		{"timeout not a duration", "amqp://u:" + secret + "@h?timeout=5", `timeout="5"`},
		{"timeout zero", "amqp://h?timeout=0s", `timeout="0s"`},
		{"heartbeat under a second", "amqp://h?heartbeat=500ms", `heartbeat="500ms"`},
		{"max_message_size not a number", "amqp://h?max_message_size=big", `max_message_size="big"`},
		{"max_message_size zero", "amqp://h?max_message_size=0", `max_message_size="0"`},
		{"tls option without amqps", "amqp://u:" + secret + "@h?tls_ca=/ca.pem", "need an amqps:// URL"},
		{"tls_insecure not a bool", "amqps://h?tls_insecure=maybe", `tls_insecure="maybe"`},
		{"tls_cert without tls_key", "amqps://h?tls_cert=/c.pem", "tls_cert and tls_key"},
		{"missing host", "amqp://u:" + secret + "@/vhost", "has no host"},
		{"several hosts", "amqp://u:" + secret + "@h1:5672,h2:5672", "one host only"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := parse(t, tc.url)
			publishertest.RequireRefused(t, tc.url, err, tc.want, secret)
		})
	}

	t.Run("bad TLS files fail Open", func(t *testing.T) {
		t.Parallel()
		garbage := filepath.Join(t.TempDir(), "ca.pem")
		if err := os.WriteFile(garbage, []byte("not a certificate"), 0o600); err != nil {
			t.Fatal(err)
		}
		for raw, want := range map[string]string{
			"amqps://h?tls_ca=/nonexistent/ca.pem":                  "tls_ca",
			"amqps://h?tls_ca=" + garbage:                           "no PEM certificate",
			"amqps://h?tls_cert=/nonexistent/c&tls_key=/nonexist/k": "tls_cert/tls_key",
		} {
			_, err := publisher.Open(context.Background(), raw)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Open(%q): %v, want an error about %s", raw, err, want)
			}
		}
	})

	t.Run("schemes registered", func(t *testing.T) {
		t.Parallel()
		for _, raw := range []string{"amqp://h", "amqps://h"} {
			if err := publisher.Check(raw); err != nil {
				t.Errorf("Check(%q): %v", raw, err)
			}
		}
	})
}

// silentServer listens on a port that accepts connections and never speaks
// AMQP, like a broker that hangs. hangUp closes it and every connection it
// took; it also runs when the test ends.
func silentServer(t *testing.T) (addr string, hangUp func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	var mu sync.Mutex
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	var once sync.Once
	hangUp = func() {
		once.Do(func() {
			_ = ln.Close()
			<-accepted
			mu.Lock()
			defer mu.Unlock()
			for _, c := range held {
				_ = c.Close()
			}
		})
	}
	t.Cleanup(hangUp)
	return ln.Addr().String(), hangUp
}

// TestSilentServerIsUnavailableWithinTheTimeout points the driver at a port
// that accepts connections and never speaks AMQP, like a broker that hangs.
func TestSilentServerIsUnavailableWithinTheTimeout(t *testing.T) {
	t.Parallel()
	addr, _ := silentServer(t)
	const timeout = 300 * time.Millisecond
	p := openPublisher(t, "amqp://"+addr+"?timeout="+timeout.String())
	began := time.Now()
	if err := p.Ping(context.Background()); err == nil {
		t.Fatal("Ping to a silent server succeeded")
	}
	requireUnavailable(t, publishertest.Publish(t, p, newEvent("orders.created", "k", "1", "")), "connect to RabbitMQ")
	if took := time.Since(began); took > 10*timeout {
		t.Errorf("Ping and Publish to a silent server took %s with timeout=%s", took, timeout)
	}
}

// TestPingReturnsWithinTheCallersDeadline checks that Ping answers within a
// context shorter than the URL's timeout, as /readyz's 2s budget needs,
// however long RabbitMQ takes.
func TestPingReturnsWithinTheCallersDeadline(t *testing.T) {
	t.Parallel()
	addr, hangUp := silentServer(t)
	// Publisher.Close waits for the connect the abandoned check still runs.
	defer hangUp()
	const timeout = 20 * time.Second
	p := openPublisher(t, "amqp://"+addr+"?timeout="+timeout.String())
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	err := p.Ping(ctx)
	took := time.Since(began)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Ping to a silent server with a 300ms context: %v, want context.DeadlineExceeded", err)
	}
	if took > timeout/2 {
		t.Errorf("Ping with a 300ms context took %s (timeout=%s)", took, timeout)
	}
}
