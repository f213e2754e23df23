package relay_test

import (
	"context"
	"flag"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/natstest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/relay"
	"github.com/outbox-relay/relay/pkg/storage"
)

var (
	latencyEvents = flag.Int("latency.events", 1000, "events the latency benchmark inserts")
	latencyRate   = flag.Int("latency.rate", 100, "single-event transactions per second in the latency benchmark")
	latencyPoll   = flag.Duration("latency.poll", 100*time.Millisecond, "POLL_INTERVAL in the latency benchmark (the only wakeup on MySQL)")
)

// ackClock records, for every acknowledged event, the time from its
// created_at (its transaction's start) to the broker's acknowledgement,
// and when it was acknowledged, by event type (one per event here).
type ackClock struct {
	publisher.Publisher
	mu        sync.Mutex
	latencies []time.Duration
	acked     map[string]time.Time
}

func (a *ackClock) Publish(ctx context.Context, batch []outbox.Event) []error {
	errs := a.Publisher.Publish(ctx, batch)
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.acked == nil {
		a.acked = map[string]time.Time{}
	}
	for i, err := range errs {
		if err == nil {
			a.latencies = append(a.latencies, now.Sub(batch[i].CreatedAt))
			a.acked[batch[i].Type] = now
		}
	}
	return errs
}

// sinceCommit is, for each event type in committed (when the producer's
// COMMIT returned), the time from then to the acknowledgement.
func (a *ackClock) sinceCommit(committed map[string]time.Time) []time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	var ds []time.Duration
	for typ, at := range committed {
		if acked, ok := a.acked[typ]; ok {
			ds = append(ds, acked.Sub(at))
		}
	}
	return ds
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func (a *ackClock) percentile(p float64) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return percentile(a.latencies, p)
}

// trickleRelay starts one relay on store that publishes into a file-backed
// JetStream stream of an in-process NATS server taking subjects
// (prefix.>), each acknowledgement timed by the returned ackClock, woken
// by listen's notifications where listen is not nil and polling every
// poll. stop ends it and waits for it.
func trickleRelay(b *testing.B, store storage.Queue, listen storage.Notifier, prefix string, poll time.Duration) (clock *ackClock, stop func()) {
	b.Helper()
	srv := natstest.Start(b)
	srv.Stream(b, jetstream.StreamConfig{Name: strings.ToUpper(prefix), Subjects: []string{prefix + ".>"}, Storage: jetstream.FileStorage})
	pub, err := publisher.Open(context.Background(), srv.URL())
	if err != nil {
		b.Fatal(err)
	}
	clock = &ackClock{Publisher: pub}
	cfg := relay.Config{RelayID: prefix, NotifyDebounce: relay.NotifyDebounceDefault, PollInterval: poll}
	e, err := relay.New(cfg, store, clock)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); e.Run(ctx) }()
	if listen != nil {
		wg.Add(1)
		go func() { defer wg.Done(); e.Listen(ctx, listen) }()
	}
	return clock, func() {
		cancel()
		wg.Wait()
		_ = pub.Close(context.Background())
	}
}

// BenchmarkLatencyNATS inserts one event per transaction at -latency.rate
// per second and reports the created_at → acknowledgement latency
// percentiles. On PostgreSQL the relay listens for notifications; on MySQL,
// which cannot notify, it polls every -latency.poll.
func BenchmarkLatencyNATS(b *testing.B) {
	tb := newBenchTable(b)
	listen, _ := tb.store.(storage.Notifier)
	clock, stop := trickleRelay(b, tb.store, listen, "latency", *latencyPoll)
	defer stop()

	committed := map[string]time.Time{}
	b.ResetTimer()
	for n := range b.N {
		tick := time.NewTicker(time.Second / time.Duration(*latencyRate))
		for i := range *latencyEvents {
			<-tick.C
			typ := "latency.e" + strconv.Itoa(n*(*latencyEvents)+i)
			tb.insertOne(b, typ)
			committed[typ] = time.Now()
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
	// From when the producer's COMMIT returned: the measure, which
	// leaves out the insert and its commit (an fsync).
	fromCommit := clock.sinceCommit(committed)
	b.ReportMetric(ms(percentile(fromCommit, 0.50)), "commit-p50-ms")
	b.ReportMetric(ms(percentile(fromCommit, 0.99)), "commit-p99-ms")
	b.ReportMetric(0, "ns/op")
}
