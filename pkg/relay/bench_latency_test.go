package relay_test

import (
	"context"
	"flag"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/nats/natstest"
	"github.com/outbox-relay/relay/pkg/relay"
	"github.com/outbox-relay/relay/pkg/storage"
)

var (
	latencyEvents = flag.Int("latency.events", 1000, "events the latency benchmark inserts")
	latencyRate   = flag.Int("latency.rate", 100, "single-event transactions per second in the latency benchmark")
	latencyPoll   = flag.Duration("latency.poll", 100*time.Millisecond, "POLL_INTERVAL in the latency benchmark (the only wakeup on MySQL)")
)

// ackClock records, for every acknowledged event, the time from its
// created_at to the broker's acknowledgement.
type ackClock struct {
	publisher.Publisher
	mu        sync.Mutex
	latencies []time.Duration
}

func (a *ackClock) Publish(ctx context.Context, batch []outbox.Event) []error {
	errs := a.Publisher.Publish(ctx, batch)
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, err := range errs {
		if err == nil {
			a.latencies = append(a.latencies, now.Sub(batch[i].CreatedAt))
		}
	}
	return errs
}

func (a *ackClock) percentile(p float64) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := slices.Clone(a.latencies)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// BenchmarkLatencyNATS inserts one event per transaction at -latency.rate
// per second and reports the created_at → acknowledgement latency
// percentiles. On PostgreSQL the relay listens for notifications; on MySQL,
// which cannot notify, it polls every -latency.poll.
func BenchmarkLatencyNATS(b *testing.B) {
	tb := newBenchTable(b)
	srv := natstest.Start(b)
	srv.Stream(b, jetstream.StreamConfig{Name: "LATENCY", Subjects: []string{"latency.>"}, Storage: jetstream.FileStorage})
	pub, err := publisher.Open(context.Background(), srv.URL())
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close(context.Background())
	clock := &ackClock{Publisher: pub}

	cfg := relay.Config{RelayID: "latency", NotifyDebounce: relay.NotifyDebounceDefault, PollInterval: *latencyPoll}
	e, err := relay.New(cfg, tb.store, clock)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); e.Run(ctx) }()
	if n, ok := tb.store.(storage.Notifier); ok {
		wg.Add(1)
		go func() { defer wg.Done(); e.Listen(ctx, n) }()
	}
	defer func() { cancel(); wg.Wait() }()

	b.ResetTimer()
	for range b.N {
		tick := time.NewTicker(time.Second / time.Duration(*latencyRate))
		for range *latencyEvents {
			<-tick.C
			tb.insertOne(b, "latency.event")
		}
		tick.Stop()
	}
	total := *latencyEvents * b.N
	eventually.True(b, time.Minute, func() bool { return tb.delivered(b) == total },
		func() string { return "every event delivered" })
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(clock.percentile(0.50)), "p50-ms")
	b.ReportMetric(ms(clock.percentile(0.95)), "p95-ms")
	b.ReportMetric(ms(clock.percentile(0.99)), "p99-ms")
	b.ReportMetric(0, "ns/op")
}
