package webhook_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/google/uuid"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/outbox-relay/relay/internal/harness/webhooktest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/publishertest"
)

// receiverBroker is a receiver of the test's own, routing by the event
// type in the path. Event types starting "refused." are answered 400 and
// "moved." 301; every other request is accepted. Stop closes the listener
// and cuts every connection; Start listens again on the same address; Drop
// cuts the connections and keeps listening.
type receiverBroker struct {
	rcv   *webhooktest.Receiver
	proto string // what every request must arrive over
	query string
}

func newReceiverBroker(t *testing.T, proto, query string, opts ...webhooktest.Option) *receiverBroker {
	opts = append(opts, webhooktest.Respond(func(w http.ResponseWriter, r *http.Request) {
		switch typ := strings.TrimPrefix(r.URL.Path, "/hooks/"); {
		case strings.HasPrefix(typ, "refused."):
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte("no such event type\r\n"))
		case strings.HasPrefix(typ, "moved."):
			w.Header().Set("Location", "https://elsewhere.example/hooks")
			w.WriteHeader(http.StatusMovedPermanently)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	return &receiverBroker{rcv: webhooktest.Start(t, opts...), proto: proto, query: query}
}

func (b *receiverBroker) Open(t *testing.T) publisher.Publisher {
	q := "timeout=2s&secret_file=" + url.QueryEscape(webhooktest.SecretFile(t, webhooktest.Secret)) + b.query
	if c := b.rcv.Certs(); c != nil {
		q += "&tls_ca=" + url.QueryEscape(c.CA)
	}
	return openPublisher(t, b.rcv.URL("/hooks/{event_type}?"+q))
}

func (b *receiverBroker) Destination(*testing.T) string {
	return "dest." + strings.ReplaceAll(uuid.NewString(), "-", "")
}

// Received checks every request's signature with the Standard Webhooks
// library, as a receiver would, and maps it for the suite. HTTP header
// names are case-insensitive, so each header is listed as Go's server
// spells it, in lower case (tenant, traceparent), and as outbox spells the
// relay's own (X-Event-ID): the names the suite looks up.
func (b *receiverBroker) Received(t *testing.T, eventType string, want int) []publishertest.Message {
	wh, err := standardwebhooks.NewWebhook(webhooktest.Secret)
	if err != nil {
		t.Fatal(err)
	}
	path := "/hooks/" + url.PathEscape(eventType)
	var out []publishertest.Message
	for _, r := range b.rcv.Delivered(t, want, func(r *webhooktest.Request) bool { return r.Path == path }) {
		if err := wh.Verify(r.Body, r.Header); err != nil {
			t.Fatalf("event %s: Standard Webhooks verification failed: %v", r.Header.Get("webhook-id"), err)
		}
		if r.Proto != b.proto {
			t.Fatalf("request arrived over %s, want %s", r.Proto, b.proto)
		}
		typ, err := url.PathUnescape(strings.TrimPrefix(r.Path, "/hooks/"))
		if err != nil {
			t.Fatal(err)
		}
		h := map[string]string{}
		for k := range r.Header {
			h[k] = r.Header.Get(k)
			h[strings.ToLower(k)] = r.Header.Get(k)
		}
		for _, k := range []string{outbox.HeaderEventID, outbox.HeaderEventType, outbox.HeaderPartitionKey} {
			if v := r.Header.Get(k); v != "" {
				h[k] = v
			}
		}
		out = append(out, publishertest.Message{
			ID: r.Header.Get("webhook-id"), Type: typ, Key: r.Header.Get(outbox.HeaderPartitionKey),
			Payload: r.Body, Headers: h,
		})
	}
	return out
}

func (b *receiverBroker) Stop(*testing.T)    { b.rcv.Stop() }
func (b *receiverBroker) Start(t *testing.T) { b.rcv.Restart(t) }
func (b *receiverBroker) Drop(*testing.T)    { b.rcv.Drop() }

// permanentCases are the events no endpoint answer or HTTP request can
// carry through.
var permanentCases = []publishertest.PermanentCase{
	{Name: "endpoint answers 400", Event: outbox.Event{Type: "refused.created"}, KeepType: true, WantErr: `answered 400 Bad Request: no such event type`},
	{Name: "endpoint redirects", Event: outbox.Event{Type: "moved.created"}, KeepType: true, WantErr: `301 Moved Permanently, Location "https://elsewhere.example/hooks": redirects are not followed`},
	{Name: "header name not a token", Event: outbox.Event{Headers: []byte(`{"bad name":"x"}`)}, WantErr: `header "bad name": name is not an HTTP token`},
	{Name: "header value with a line break", Event: outbox.Event{Headers: []byte(`{"note":"a\r\nX-Injected: 1"}`)}, WantErr: `header "note": value contains a line break`},
	{Name: "connection header", Event: outbox.Event{Headers: []byte(`{"Connection":"close"}`)}, WantErr: `header "Connection": the HTTP client sets it`},
	{Name: "partition key with a line break", Event: outbox.Event{PartitionKey: "a\nb"}, WantErr: `partition_key "a\nb" cannot travel`},
	{Name: "partition key with white space around it", Event: outbox.Event{PartitionKey: "  spaced key  "}, WantErr: `partition_key "  spaced key  " cannot travel in the X-Partition-Key header: value begins or ends with white space`},
	{Name: "header value with white space around it", Event: outbox.Event{Headers: []byte(`{"note":"  padded  "}`)}, WantErr: `header "note": value begins or ends with white space`},
	{Name: "header names differing only in case", Event: outbox.Event{Headers: []byte(`{"Tenant":"a","tenant":"b"}`)}, WantErr: `headers "Tenant" and "tenant": HTTP header names ignore letter case`},
	{Name: "content type twice", Event: outbox.Event{Headers: []byte(`{"Content-Type":"a/b","content-type":"c/d"}`)}, WantErr: `headers "Content-Type" and "content-type"`},
	{Name: "headers not an object", Event: outbox.Event{Headers: []byte(`["x"]`)}, WantErr: "headers must be a JSON object"},
	{Name: "header holds an object", Event: outbox.Event{Headers: []byte(`{"meta":{"a":1}}`)}, WantErr: `header "meta"`},
}

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, proto, query string
		opts               []webhooktest.Option
	}{
		{"HTTP1", "HTTP/1.1", "", nil},
		{"HTTP2OverTLS", "HTTP/2.0", "", []webhooktest.Option{webhooktest.TLS()}},
		{"H2C", "HTTP/2.0", "&h2c=true", []webhooktest.Option{webhooktest.H2C()}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			publishertest.Run(t, publishertest.Driver{
				NewBroker: func(t *testing.T) publishertest.Broker {
					return newReceiverBroker(t, c.proto, c.query, c.opts...)
				},
				HeaderEventID: true,
				Permanent:     permanentCases,
				Refuses:       httpAltered,
			})
		})
	}
}

// Helpers shared by this package's tests.

// openPublisher opens the driver through publisher.Open and closes it at
// the end of the test.
func openPublisher(t testing.TB, rawURL string) publisher.Publisher {
	t.Helper()
	p, err := publisher.Open(context.Background(), rawURL)
	if err != nil {
		t.Fatalf("publisher.Open: %v", err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

// httpAltered is the documented rule for what HTTP headers cannot carry
// as written: line breaks and other control characters (tab aside), which
// RFC 9110 does not allow, and spaces or tabs around the value, which HTTP
// strips. Bytes that are not UTF-8 arrive as written.
func httpAltered(_, v string) bool {
	return strings.ContainsFunc(v, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }) ||
		strings.Trim(v, " \t") != v
}
