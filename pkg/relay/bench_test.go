package relay_test

import (
	"context"
	"flag"
	"os"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/relay/internal/harness/natstest"
	"github.com/outbox-relay/relay/pkg/publisher"
	_ "github.com/outbox-relay/relay/pkg/publisher/null"
	"github.com/outbox-relay/relay/pkg/relay"
	"github.com/outbox-relay/relay/pkg/storage"
)

var (
	benchEvents   = flag.Int("events", 100_000, "events drained by each benchmark iteration")
	benchBatch    = flag.Int("batch", relay.BatchSizeDefault, "BATCH_SIZE for benchmarks")
	benchInFlight = flag.Int("inflight", relay.MaxInFlightBatchesDefault, "MAX_IN_FLIGHT_BATCHES for benchmarks")
	// Unlike -cpuprofile, it leaves out filling the table between drains.
	drainProfile = flag.String("drainprofile", "", "write a CPU profile of the last drain alone to this file")
)

// benchDrain measures draining a backlog of *benchEvents 200-byte events
// through pub and reports events/s.
func benchDrain(b *testing.B, pub publisher.Publisher, eventType string) {
	benchDrainWith(b, pub, eventType, 0, storage.OrderingNone)
}

// benchDrainWith is benchDrain with the events spread over keys partition
// keys (0: no key) and the given ordering, on the -storage database.
func benchDrainWith(b *testing.B, pub publisher.Publisher, eventType string, keys int, ordering storage.Ordering) {
	benchDrainMode(b, pub, eventType, keys, ordering, false)
}

// benchDrainMode is benchDrainWith, settling delivered events by deleting
// their rows when deleteDelivered is set (DELIVERED_RETENTION=0). Where
// the database reports it exactly (PostgreSQL) it also reports what the
// drain added to the table's size, indexes included, before any vacuum.
func benchDrainMode(b *testing.B, pub publisher.Publisher, eventType string, keys int, ordering storage.Ordering, deleteDelivered bool) {
	benchDrainConfig(b, pub, eventType, keys, relay.Config{Ordering: ordering, DeleteDelivered: deleteDelivered})
}

// benchDrainConfig is benchDrainMode with the engine's settings in cfg
// (those the benchmark does not set itself).
func benchDrainConfig(b *testing.B, pub publisher.Publisher, eventType string, keys int, cfg relay.Config) {
	tb := newBenchTable(b)
	var grown, wal int64
	var total, dbCPU, first time.Duration
	for i := range b.N {
		b.StopTimer()
		tb.fill(b, *benchEvents, eventType, keys)
		// The drain is over when the engine has settled every event: it
		// counts them, while asking the table would make the database
		// walk the pending index from its start, over every dead entry,
		// again and again, and measure itself.
		var settled settledCounter
		cfg.Observer = &settled
		cfg.RelayID = "bench"
		cfg.BatchSize = *benchBatch
		cfg.MaxInFlightBatches = *benchInFlight
		cfg.PollInterval = 10 * time.Millisecond
		e, err := relay.New(cfg, tb.store, pub)
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		stopProfile := func() {}
		if *drainProfile != "" && i == b.N-1 {
			stopProfile = startCPUProfile(b, *drainProfile)
		}
		var size0 int64
		if tb.bytes != nil {
			size0 = tb.bytes(b)
		}
		var wal0 int64
		if tb.walAt != nil {
			wal0 = tb.walAt(b)
		}
		b.StartTimer()
		began := time.Now()
		sc0, cc0 := serverCPU(), selfCPU()
		go func() { e.Run(ctx); close(done) }()
		settled.await(b, int64(*benchEvents))
		total += time.Since(began)
		first += settled.first().Sub(began)
		dbCPU += serverCPU() - sc0
		if tb.walAt != nil {
			wal += tb.walAt(b) - wal0
		}
		b.Logf("CPU per event: database server %.1f µs, this process (relay and in-process broker) %.1f µs",
			perEvent(serverCPU()-sc0, *benchEvents), perEvent(selfCPU()-cc0, *benchEvents))
		b.StopTimer()
		stopProfile()
		cancel()
		<-done
		if tb.bytes != nil {
			grown += tb.bytes(b) - size0
		}
		switch {
		case cfg.DeleteDelivered:
			if left := tb.rows(b); left != 0 {
				b.Fatalf("%d rows left in delete mode, want none", left)
			}
		default:
			if got := tb.delivered(b); got != *benchEvents {
				b.Fatalf("%d events delivered, want %d", got, *benchEvents)
			}
		}
	}
	b.ReportMetric(float64(*benchEvents)*float64(b.N)/total.Seconds(), "events/s")
	// All of the database server's processes, over the drains: what relaying
	// costs the database the relay shares with the application.
	b.ReportMetric(perEvent(dbCPU, *benchEvents*b.N), "db-µs/event")
	b.ReportMetric(float64(first.Milliseconds())/float64(b.N), "first-ms")
	if tb.bytes != nil {
		b.ReportMetric(float64(grown)/float64(*benchEvents)/float64(b.N), "table-B-grown/event")
	}
	if tb.walAt != nil {
		b.ReportMetric(float64(wal)/float64(*benchEvents)/float64(b.N), "wal-B/event")
	}
}

func startCPUProfile(b *testing.B, path string) (stop func()) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}
}

// BenchmarkDrainNATS drains into a JetStream stream: BENCH_NATS_URL when
// set, else an in-process server.
func BenchmarkDrainNATS(b *testing.B) {
	benchDrain(b, benchNATS(b), "bench.event")
}

// benchNATS opens a publisher to a JetStream stream BENCH capturing
// bench.>: on BENCH_NATS_URL when set, else on an in-process server.
func benchNATS(b *testing.B) publisher.Publisher {
	url := os.Getenv("BENCH_NATS_URL")
	if url == "" {
		srv := natstest.Start(b)
		url = srv.URL()
	}
	_, js := connectJS(b, url)
	if _, err := js.CreateOrUpdateStream(context.Background(), jetstream.StreamConfig{
		Name: "BENCH", Subjects: []string{"bench.>"}, Storage: jetstream.FileStorage,
	}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = js.DeleteStream(context.Background(), "BENCH") })
	pub, err := publisher.Open(context.Background(), url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = pub.Close(context.Background()) })
	return pub
}

// orderingKeys is how many partition keys the ordering benchmarks spread
// their backlog over.
var orderingKeys = flag.Int("ordering.keys", 100, "partition keys of BenchmarkDrainNATSPartition's and …Keyed's backlog")

// BenchmarkDrainNATSPartition drains a backlog spread over -ordering.keys
// partition keys with ORDERING=partition; compare with
// BenchmarkDrainNATSKeyed, the same backlog unordered, in the same run
// (events/s, and first-ms: how long after the start the first event was
// settled).
func BenchmarkDrainNATSPartition(b *testing.B) {
	benchDrainWith(b, benchNATS(b), "bench.event", *orderingKeys, storage.OrderingPartition)
}

// BenchmarkDrainNATSKeyed is BenchmarkDrainNATSPartition's backlog with
// ORDERING=none.
func BenchmarkDrainNATSKeyed(b *testing.B) {
	benchDrainWith(b, benchNATS(b), "bench.event", *orderingKeys, storage.OrderingNone)
}

// BenchmarkDrainNullDelete is BenchmarkDrainNull with
// DELIVERED_RETENTION=0: delivered rows are deleted in the settle
// statement instead of marked DELIVERED.
func BenchmarkDrainNullDelete(b *testing.B) {
	benchDrainMode(b, benchNull(b), "bench.event", 0, storage.OrderingNone, true)
}

// BenchmarkDrainNATSDelete is BenchmarkDrainNATS with
// DELIVERED_RETENTION=0.
func BenchmarkDrainNATSDelete(b *testing.B) {
	benchDrainMode(b, benchNATS(b), "bench.event", 0, storage.OrderingNone, true)
}

// BenchmarkDrainNull measures the storage side alone.
func BenchmarkDrainNull(b *testing.B) {
	benchDrain(b, benchNull(b), "bench.event")
}

// BenchmarkDrainNullStatus is BenchmarkDrainNull with LEASE_MODE=status:
// claimed rows move to DELIVERING under a lease, as every claim did before
// claims were held in their transaction (the default where the storage can).
func BenchmarkDrainNullStatus(b *testing.B) {
	benchDrainConfig(b, benchNull(b), "bench.event", 0, relay.Config{LeaseMode: relay.LeaseStatus})
}

// BenchmarkDrainNullStatusDelete is BenchmarkDrainNullStatus with
// DELIVERED_RETENTION=0.
func BenchmarkDrainNullStatusDelete(b *testing.B) {
	benchDrainConfig(b, benchNull(b), "bench.event", 0, relay.Config{LeaseMode: relay.LeaseStatus, DeleteDelivered: true})
}

func benchNull(b *testing.B) publisher.Publisher {
	pub, err := publisher.Open(context.Background(), "null://")
	if err != nil {
		b.Fatal(err)
	}
	return pub
}
