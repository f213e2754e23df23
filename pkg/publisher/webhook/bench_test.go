package webhook_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/harness/webhooktest"
	"github.com/outbox-relay/relay/pkg/outbox"
)

// BenchmarkPublish measures the driver alone, without a database: batches
// of 500 200-byte events, four at once as the engine's default
// MAX_IN_FLIGHT_BATCHES publishes them, to an in-process endpoint that
// answers each request after 5 ms, with the default concurrency and
// signing on.
func BenchmarkPublish(b *testing.B) {
	rcv := webhooktest.Start(b, webhooktest.CountOnly(), webhooktest.Respond(func(w http.ResponseWriter, r *http.Request) {
		t := time.NewTimer(5 * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	p := openPublisher(b, signedURL(b, rcv, "/hooks/{event_type}", ""))
	const batchSize, inFlight = 500, 4
	batches := make(chan []outbox.Event, inFlight)
	b.ResetTimer()
	began := time.Now()
	done := make(chan struct{})
	for range inFlight {
		go func() {
			for batch := range batches {
				for i, err := range p.Publish(context.Background(), batch) {
					if err != nil {
						b.Errorf("event %d: %v", i, err)
					}
				}
			}
			done <- struct{}{}
		}()
	}
	events := 0
	for events < b.N {
		batch := make([]outbox.Event, min(batchSize, b.N-events))
		for i := range batch {
			batch[i] = newEvent("bench.event", "", events+i)
			batch[i].Payload = make([]byte, 200)
		}
		events += len(batch)
		batches <- batch
	}
	close(batches)
	for range inFlight {
		<-done
	}
	b.ReportMetric(float64(b.N)/time.Since(began).Seconds(), "events/s")
}
