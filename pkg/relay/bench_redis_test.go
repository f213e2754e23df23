package relay_test

import (
	"net/url"
	"os"
	"testing"

	"github.com/outbox-relay/relay/internal/harness/redistest"
)

// BenchmarkDrainRedis drains into the stream bench.event under a prefix of
// its own: on BENCH_REDIS_URL (redis://…) when set, else on the local Redis
// (TEST_REDIS_URL, or 127.0.0.1:6379). The stream is deleted afterwards.
func BenchmarkDrainRedis(b *testing.B) {
	raw := os.Getenv("BENCH_REDIS_URL")
	if raw == "" {
		raw = redistest.URL()
	}
	admin := redistest.Client(b, raw)
	prefix := redistest.Prefix(b, admin)
	u, err := url.Parse(raw)
	if err != nil {
		b.Fatal(err)
	}
	q := u.Query()
	q.Set("stream_prefix", prefix)
	u.RawQuery = q.Encode()
	benchDrain(b, openRedis(b, u.String()), "bench.event")
}
