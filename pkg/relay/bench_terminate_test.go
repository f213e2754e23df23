package relay_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/relay"
)

// `make bench MODE=terminate` (issue 42, case 4): a drain of -events
// written by one bulk transaction, held claims into NATS, with kills of the
// claiming connections during it (pg_terminate_backend of a held claim's
// session, as a failover or an idle timeout ends it), against the same
// drain without kills, in the same run. Before the watched writers kept a
// place, each kill made the claims after it reread the writer's rows from
// its first one, dead index entries and all: 3-4 times as long.

// terminateKills is how many held claims a drain with kills ends.
const terminateKills = 10

// BenchmarkDrainTerminate drains into a JetStream stream (BENCH_NATS_URL,
// else in-process), first without kills, then with terminateKills.
func BenchmarkDrainTerminate(b *testing.B) {
	tb := newBenchTable(b)
	if tb.fillOneWriter == nil {
		b.Skip("no held claims to terminate on this storage")
	}
	pub := benchNATS(b)
	var plain, killed time.Duration
	var kills int
	for range b.N {
		without, _ := drainKilling(b, tb, pub, 0)
		with, k := drainKilling(b, tb, pub, terminateKills)
		plain, killed, kills = plain+without, killed+with, kills+k
		b.Logf("%d events of one writer: %s without kills, %s with %d (%.2fx)",
			*benchEvents, without.Round(time.Millisecond), with.Round(time.Millisecond), k, with.Seconds()/without.Seconds())
	}
	b.ReportMetric(plain.Seconds()/float64(b.N), "s-without-kills")
	b.ReportMetric(killed.Seconds()/float64(b.N), "s-with-kills")
	b.ReportMetric(killed.Seconds()/plain.Seconds(), "ratio")
	b.ReportMetric(float64(kills)/float64(b.N), "kills")
}

// drainKilling fills tb with -events of one writer and drains them with a
// relay of its own into pub, ending a held claim's session each time
// another 1/(kills+1) of the events was delivered. It returns how long
// the drain took, until every row was DELIVERED, and how many sessions it
// ended.
func drainKilling(b *testing.B, tb benchTable, pub publisher.Publisher, kills int) (time.Duration, int) {
	b.Helper()
	b.StopTimer()
	n := *benchEvents
	tb.fillOneWriter(b, n, "bench.event")
	q := &killObserver{settled: make(chan struct{}, 1)}
	e, err := relay.New(relay.Config{
		RelayID:            "bench",
		BatchSize:          *benchBatch,
		MaxInFlightBatches: *benchInFlight,
		PollInterval:       10 * time.Millisecond,
		Observer:           q,
	}, tb.store, pub)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	b.StartTimer()
	began := time.Now()
	go func() { e.Run(ctx); close(done) }()
	var ended atomic.Int64
	killerDone := make(chan struct{})
	go func() {
		defer close(killerDone)
		for k := 1; k <= kills; k++ {
			next := int64(n * k / (kills + 1))
			for q.delivered.Load() < next {
				select {
				case <-ctx.Done():
					return
				case <-q.settled:
				}
			}
			// A held claim is at the broker for milliseconds: look until
			// one is.
			for !tb.killHeld(b) {
				if ctx.Err() != nil {
					return
				}
			}
			ended.Add(1)
		}
	}()
	eventually.True(b, 30*time.Minute, func() bool { return q.delivered.Load() >= int64(n) },
		func() string { return fmt.Sprintf("%d of %d events delivered", q.delivered.Load(), n) })
	// Killed batches may be delivered twice: the drain is over when every
	// row is.
	eventually.True(b, 10*time.Minute, func() bool { return tb.delivered(b) == n },
		func() string { return fmt.Sprintf("%d of %d rows delivered", tb.delivered(b), n) })
	took := time.Since(began)
	b.StopTimer()
	if c := q.claims.Load(); c > 0 {
		b.Logf("kills %d: %d claims, mean %s, %d deliveries of %d events",
			kills, c, time.Duration(q.spent.Load()/c).Round(time.Microsecond), q.delivered.Load(), n)
	}
	cancel()
	<-killerDone
	<-done
	return took, int(ended.Load())
}

// killObserver is roundObserver, signalling settled after every batch.
type killObserver struct {
	roundObserver
	settled chan struct{}
}

func (o *killObserver) Finished(ctx context.Context, out relay.Outcome) {
	o.roundObserver.Finished(ctx, out)
	select {
	case o.settled <- struct{}{}:
	default:
	}
}
