package relay_test

import (
	"context"
	"os"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/relay/internal/harness/kafkatest"
	"github.com/outbox-relay/relay/pkg/publisher"
)

// BenchmarkDrainKafka drains into the topic bench.event: on BENCH_KAFKA_URL
// (kafka://…, where the topic must exist) when set, else on an in-process
// kfake cluster of three brokers with the topic in six partitions.
func BenchmarkDrainKafka(b *testing.B) {
	url := os.Getenv("BENCH_KAFKA_URL")
	if url == "" {
		c := kafkatest.Start(b, kfake.NumBrokers(3))
		c.CreateTopic(b, "bench.event", 6, nil)
		url = "kafka://" + c.Addrs()[0]
	}
	pub, err := publisher.Open(context.Background(), url)
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close(context.Background())
	benchDrain(b, pub, "bench.event")
}
