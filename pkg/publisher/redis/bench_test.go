package redis_test

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/internal/harness/redistest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher/publishertest"
)

// BenchmarkPublish measures the driver alone: batches of 500 events with
// 200-byte payloads, one header and a partition key, into one stream on the
// shared Redis, in the default format and as CloudEvents. Compare with
// BenchmarkDrainRedis in pkg/relay, which adds the outbox table.
func BenchmarkPublish(b *testing.B) {
	for _, format := range []string{"relay", "cloudevents"} {
		b.Run(format, func(b *testing.B) { benchPublish(b, "&format="+format) })
	}
}

func benchPublish(b *testing.B, query string) {
	admin := redistest.Shared(b)
	prefix := redistest.Prefix(b, admin)
	pub := openPublisher(b, redistest.URL()+"?stream_prefix="+prefix+"&maxlen=100000"+query)
	batch := make([]outbox.Event, 500)
	payload := make([]byte, 200)
	for i := range payload {
		payload[i] = 'x'
	}
	for i := range batch {
		batch[i] = outbox.Event{
			ID: uuid.Must(uuid.NewV7()), Type: "bench.event", PartitionKey: "customer-42",
			Payload: payload, Headers: []byte(`{"content-type":"application/json"}`), CreatedAt: time.Now(),
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		publishertest.RequireDelivered(b, publishertest.Publish(b, pub, batch...))
	}
	b.ReportMetric(float64(len(batch)*b.N)/b.Elapsed().Seconds(), "events/s")
}
