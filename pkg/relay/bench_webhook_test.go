package relay_test

import (
	"flag"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/harness/webhooktest"
)

var benchWebhookConcurrency = flag.Int("webhook-concurrency", 0, "the webhook driver's concurrency option for BenchmarkDrainWebhook (0: its default)")

// BenchmarkDrainWebhook drains into an in-process HTTP/1.1 endpoint that
// answers every request 5 ms after it arrives, as a receiver that does a
// little work would, through the webhook driver with its default options
// (concurrency, keep-alive pool; -webhook-concurrency changes the first) and
// signing on.
func BenchmarkDrainWebhook(b *testing.B) {
	rcv := webhooktest.Start(b, webhooktest.CountOnly(), webhooktest.Respond(func(w http.ResponseWriter, r *http.Request) {
		t := time.NewTimer(5 * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	query := ""
	if *benchWebhookConcurrency > 0 {
		query = fmt.Sprintf("&concurrency=%d", *benchWebhookConcurrency)
	}
	benchDrain(b, openWebhook(b, rcv, "/hooks/{event_type}", query), "bench.event")
	b.Logf("max in flight %d, connections %d", rcv.MaxInFlight(), rcv.Connections())
}
