package relay_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/internal/harness/webhooktest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	_ "github.com/outbox-relay/relay/pkg/publisher/webhook" // registers http:// and https://
	"github.com/outbox-relay/relay/pkg/relay"
	"github.com/outbox-relay/relay/pkg/storage"
)

// openWebhook opens the webhook driver on rcv's path, signing with
// webhooktest.Secret, with the extra options in query (starting with '&').
func openWebhook(t testing.TB, rcv *webhooktest.Receiver, path, query string) publisher.Publisher {
	t.Helper()
	raw := rcv.URL(path + "?secret_file=" + url.QueryEscape(webhooktest.SecretFile(t, webhooktest.Secret)) + query)
	pub, err := publisher.Open(context.Background(), raw)
	if err != nil {
		t.Fatalf("open webhook publisher: %v", err)
	}
	t.Cleanup(func() { _ = pub.Close(context.Background()) })
	return pub
}

func TestWebhookDeliversEveryEventOnceSigned(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	rcv := webhooktest.Start(t)

	const n = 1200
	events := make([]pgtest.Event, n)
	for i := range events {
		events[i] = pgtest.Event{
			Type:         "orders.created",
			PartitionKey: fmt.Sprintf("customer-%d", i%7),
			Payload:      pgtest.Payload(i, 200),
			Headers:      fmt.Sprintf(`{"tenant":"acme","seq":%d,"content-type":"application/json"}`, i),
		}
		if i%10 == 9 {
			events[i].PartitionKey = ""
		}
	}
	ids := tb.Insert(t, events...)

	start(t, relay.Config{BatchSize: 100}, tb.Store, openWebhook(t, rcv, "/hooks/{event_type}", ""))
	waitCounts(t, tb, 30*time.Second, map[outbox.Status]int{outbox.StatusDelivered: n})

	byID := map[string]int{}
	for i, id := range ids {
		byID[id.String()] = i
	}
	wh, err := standardwebhooks.NewWebhook(webhooktest.Secret)
	if err != nil {
		t.Fatal(err)
	}
	got := rcv.Delivered(t, n, nil)
	if len(got) != n {
		t.Fatalf("endpoint took %d requests, want %d", len(got), n)
	}
	seen := map[string]bool{}
	for _, r := range got {
		id := r.Header.Get("webhook-id")
		i, ok := byID[id]
		if !ok || seen[id] {
			t.Fatalf("request for event %q: unknown or repeated", id)
		}
		seen[id] = true
		if err := wh.Verify(r.Body, r.Header); err != nil {
			t.Fatalf("event %d: signature: %v", i, err)
		}
		e := events[i]
		if r.Path != "/hooks/orders.created" || string(r.Body) != string(e.Payload) ||
			r.Header.Get("Content-Type") != "application/json" || r.Header.Get("Tenant") != "acme" ||
			r.Header.Get("Seq") != fmt.Sprint(i) || r.Header.Get(outbox.HeaderPartitionKey) != e.PartitionKey {
			t.Fatalf("event %d arrived as %s with headers %v", i, r.Path, r.Header)
		}
	}
}

func TestWebhookPartitionOrderingEndToEnd(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	// Uneven answer times, so that requests in flight together finish in
	// any order.
	rcv := webhooktest.Start(t, webhooktest.Respond(func(w http.ResponseWriter, r *http.Request) {
		id := "0" + r.Header.Get("webhook-id") // "0" alone for the health check's HEAD
		select {
		case <-time.After(time.Duration(id[len(id)-1]%3) * time.Millisecond):
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	const n = 600
	events := make([]pgtest.Event, n)
	for i := range events {
		events[i] = pgtest.Event{Type: "orders.created", PartitionKey: fmt.Sprintf("customer-%d", i%5)}
	}
	ids := tb.Insert(t, events...)
	start(t, relay.Config{BatchSize: 50, Ordering: storage.OrderingPartition}, tb.Store,
		openWebhook(t, rcv, "/hooks/{partition_key}", "&concurrency=8"))
	waitCounts(t, tb, time.Minute, map[outbox.Status]int{outbox.StatusDelivered: n})

	pos := map[string]int{}
	for i, id := range ids {
		pos[id.String()] = i
	}
	last := map[string]int{}
	for _, r := range rcv.Delivered(t, n, nil) {
		i, key := pos[r.Header.Get("webhook-id")], strings.TrimPrefix(r.Path, "/hooks/")
		if prev, ok := last[key]; ok && i < prev {
			t.Fatalf("key %s: event %d arrived after event %d", key, i, prev)
		}
		last[key] = i
	}
}

// TestEngineHonoursRetryAfter checks the engine's side of Retry-After: a
// retryable failure waits the longer of the backoff and the endpoint's
// Retry-After, capped at RETRY_MAX_DELAY; an event held back behind it
// waits as long.
func TestEngineHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	rcv := webhooktest.Start(t, webhooktest.Respond(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hooks/slow":
			w.Header().Set("Retry-After", "30")
		case "/hooks/capped":
			w.Header().Set("Retry-After", "3600")
		}
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	ids := tb.Insert(t,
		pgtest.Event{Type: "slow", PartitionKey: "k"},
		pgtest.Event{Type: "slow", PartitionKey: "k"}, // held back behind the first
		pgtest.Event{Type: "capped"},
		pgtest.Event{Type: "plain"},
	)
	want := []float64{30, 30, 120, 1}

	start(t, relay.Config{Retry: relay.RetryPolicy{MaxAttempts: 5, BaseDelay: time.Second, MaxDelay: 2 * time.Minute}},
		tb.Store, openWebhook(t, rcv, "/hooks/{event_type}", ""))
	gaps := make([]float64, len(ids))
	eventually.True(t, 30*time.Second, func() bool {
		for i, id := range ids {
			err := tb.Pool().QueryRow(context.Background(),
				"SELECT extract(epoch FROM available_at - updated_at) FROM "+tb.Name+
					" WHERE event_id = $1 AND status = 'PENDING' AND attempts = 1", id).Scan(&gaps[i])
			if err != nil {
				return false
			}
		}
		return true
	}, func() string { return "every event waiting after its first attempt" })
	for i, gap := range gaps {
		if gap < want[i]-0.5 || gap > want[i]+0.5 {
			t.Errorf("event %d waits %.2f s before its next attempt, want %.0f s", i, gap, want[i])
		}
	}
	if row := tb.Get(t, ids[0]); !strings.Contains(row.LastError, "429 Too Many Requests (Retry-After 30s)") {
		t.Errorf("last_error %q does not say what the endpoint answered", row.LastError)
	}
}

func TestWebhookOutageSendsNothingDead(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	rcv := webhooktest.Start(t)
	const n = 10000
	ids := tb.InsertN(t, n, "outage.event")

	drainThroughOutage(t, tb, n, openWebhook(t, rcv, "/", "&timeout=2s"), rcv.Stop, func() { rcv.Restart(t) })
	// Requests cut off by the outage may have been handled before the
	// connection died and are then sent again: at least once.
	arrived := map[string]bool{}
	for _, r := range rcv.Requests() {
		if r.Status == http.StatusNoContent {
			arrived[r.Header.Get("webhook-id")] = true
		}
	}
	for _, id := range ids {
		if !arrived[id.String()] {
			t.Fatalf("event %s is DELIVERED but the endpoint never accepted it", id)
		}
	}
}

func TestWebhookHostileRowsDoNotStallTheRest(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	rcv := webhooktest.Start(t)
	drainAmongHostileRows(t, tb, openWebhook(t, rcv, "/hooks/{event_type}", ""), "good", []hostileRow{
		{name: "header name that is no token", event: pgtest.Event{Headers: `{"bad name":"v"}`},
			want: outbox.StatusDead, wantErr: `header "bad name": name is not an HTTP token`},
		{name: "header value with a line break", event: pgtest.Event{Headers: `{"note":"a\r\nX-Injected: 1"}`},
			want: outbox.StatusDead, wantErr: "line break"},
		{name: "Host header", event: pgtest.Event{Headers: `{"Host":"evil.example"}`},
			want: outbox.StatusDead, wantErr: `header "Host"`},
		{name: "partition key with a line break", event: pgtest.Event{PartitionKey: "a\nb"},
			want: outbox.StatusDead, wantErr: `partition_key "a\nb" cannot travel`},
		// HTTP would trim these, and normalise ".." away: DEAD, not altered.
		{name: "partition key with spaces around it", event: pgtest.Event{PartitionKey: "  spaced key  "},
			want: outbox.StatusDead, wantErr: `partition_key "  spaced key  " cannot travel in the X-Partition-Key header: value begins or ends with white space`},
		{name: "event_type that is a dot segment", event: pgtest.Event{Type: ".."},
			want: outbox.StatusDead, wantErr: `event_type ".." cannot fill the path segment {event_type}`},
		{name: "headers not an object", event: pgtest.Event{Headers: `["a"]`},
			want: outbox.StatusDead, wantErr: "must be a JSON object"},
		{name: "event_type that walks up the path", event: pgtest.Event{Type: "../../admin x"},
			want: outbox.StatusDelivered},
		infiniteCreatedAt,
	})
	for _, r := range rcv.Requests() {
		if r.Header.Get("X-Injected") != "" || strings.Contains(r.Path, "/admin") {
			t.Errorf("a hostile row reached the endpoint as %s with headers %v", r.Path, r.Header)
		}
	}
	if got := rcv.Delivered(t, 1, func(r *webhooktest.Request) bool { return r.Path == "/hooks/..%2F..%2Fadmin%20x" }); len(got) != 1 {
		t.Errorf("the event_type with slashes arrived %d times at its escaped path", len(got))
	}
}

// TestAnEndpointThatDropsTheConnectionOverOneEventStandsAlone: the
// endpoint closes the connection, without an answer, whenever one event
// is posted, and answers everything else. The engine sends the batch again
// in halves until that event stands alone; it is charged an attempt,
// everything else is delivered, and the relay does not pause.
func TestAnEndpointThatDropsTheConnectionOverOneEventStandsAlone(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	rcv := webhooktest.Start(t, webhooktest.Respond(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hooks/crash" {
			webhooktest.CloseConnection(w, r)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	drainAmongHostileRows(t, tb, openWebhook(t, rcv, "/hooks/{event_type}", ""), "good", []hostileRow{
		{name: "event the endpoint drops the connection over", event: pgtest.Event{Type: "crash"},
			want: outbox.StatusPending, wantErr: "closed the connection each time this event was sent"},
	})
	if n := tb.Exec(t, "SELECT 1 FROM {{table}} WHERE attempts > 0"); n != 1 {
		t.Errorf("%d rows were charged attempts, want only the culprit", n)
	}
}
