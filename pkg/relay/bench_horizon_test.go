package relay_test

import (
	"context"
	"flag"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/relay"
	"github.com/outbox-relay/relay/pkg/storage"
)

// The two benchmarks here measure claims on a database like a production
// one rather than a freshly analysed, quiet one: `make bench MODE=horizon`
// and `make bench MODE=stats` (STORAGE=mysql for MariaDB/MySQL).

// roundObserver times an engine's claims and counts its deliveries: the
// drain is over when all are delivered, which asks the table nothing.
// (Asking it whether any row is still PENDING would walk the pending index
// from its start, over every dead entry a held snapshot keeps, and measure
// that instead.) The engine claims as it would in production: held claims
// on PostgreSQL, leases on MySQL.
type roundObserver struct {
	relay.NopObserver
	claims, spent, delivered atomic.Int64
}

func (o *roundObserver) StartClaim(ctx context.Context) (context.Context, func(int, error)) {
	began := time.Now()
	return ctx, func(int, error) {
		o.spent.Add(int64(time.Since(began)))
		o.claims.Add(1)
	}
}

func (o *roundObserver) Finished(_ context.Context, out relay.Outcome) {
	o.delivered.Add(int64(out.Delivered))
}

// round is one drain's figures.
type round struct {
	rate     float64       // events/s
	claim    time.Duration // mean claim
	dbCPU    float64       // µs per event, all database server processes
	relayCPU float64       // µs per event, this process
}

// drainRound drains what is pending in tb into null:// with a relay of
// its own and measures it; n events are expected.
func drainRound(b *testing.B, tb benchTable, n int) round {
	return drainRoundOrdered(b, tb, n, storage.OrderingNone)
}

// drainRoundOrdered is drainRound with the given ORDERING.
func drainRoundOrdered(b *testing.B, tb benchTable, n int, ordering storage.Ordering) round {
	b.Helper()
	pub, err := publisher.Open(context.Background(), "null://")
	if err != nil {
		b.Fatal(err)
	}
	q := &roundObserver{}
	e, err := relay.New(relay.Config{
		RelayID:            "bench",
		BatchSize:          *benchBatch,
		MaxInFlightBatches: *benchInFlight,
		PollInterval:       10 * time.Millisecond,
		Ordering:           ordering,
		Observer:           q,
	}, tb.store, pub)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	began := time.Now()
	sc0, cc0 := serverCPU(), selfCPU()
	go func() { e.Run(ctx); close(done) }()
	eventually.True(b, 30*time.Minute, func() bool { return q.delivered.Load() >= int64(n) },
		func() string { return fmt.Sprintf("%d of %d events delivered", q.delivered.Load(), n) })
	took := time.Since(began)
	r := round{
		rate:     float64(n) / took.Seconds(),
		dbCPU:    perEvent(serverCPU()-sc0, n),
		relayCPU: perEvent(selfCPU()-cc0, n),
	}
	cancel()
	<-done
	if c := q.claims.Load(); c > 0 {
		r.claim = time.Duration(q.spent.Load() / c)
	}
	return r
}

// BenchmarkHorizon drains three rounds of -events into null:// on one
// table, without and then with a transaction holding a snapshot open for
// all three: every claimed row leaves a dead version behind that vacuum
// (PostgreSQL) or purge (InnoDB) may not remove while the snapshot lives.
// Claims that stepped over them would slow down round after round; the
// goal is every held round at 0.8 of the unheld rate or better, with the
// mean claim time flat.
func BenchmarkHorizon(b *testing.B) {
	benchHorizon(b, storage.OrderingNone)
}

// horizonKeys spreads BenchmarkHorizonOrdered's events over keys.
var horizonKeys = flag.Int("horizon.keys", 0, "partition keys BenchmarkHorizonOrdered spreads its events over (0: none)")

// BenchmarkHorizonOrdered is BenchmarkHorizon with ORDERING=partition
// (`make bench MODE=horizon-ordered`): ordered claims walk the keys' index
// and, for events without a key, the unkeyed one. The events carry no key,
// as BenchmarkHorizon's, unless -horizon.keys is set.
func BenchmarkHorizonOrdered(b *testing.B) {
	benchHorizon(b, storage.OrderingPartition)
}

// horizonAppCreated makes BenchmarkHorizon's producer set created_at
// itself, a second before the insert (`make bench MODE=horizon-app`).
var horizonAppCreated = flag.Bool("horizon.app-created", false, "BenchmarkHorizon's events carry a created_at their producer set a second before the insert (PostgreSQL)")

func benchHorizon(b *testing.B, ordering storage.Ordering) {
	const rounds = 3
	for _, held := range []bool{false, true} {
		name := "unheld"
		if held {
			name = "held"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				tb := newBenchTable(b)
				tb.analyze(b)
				if held {
					release := tb.hold(b)
					defer release()
				}
				worst := 0.0
				add := tb.add
				if *horizonAppCreated {
					if tb.addApp == nil {
						b.Skip("-horizon.app-created: PostgreSQL only")
					}
					add = tb.addApp
				}
				if ordering == storage.OrderingPartition && *horizonKeys > 0 {
					add = func(b *testing.B, n int, eventType string) { tb.addKeyed(b, n, eventType, *horizonKeys) }
				}
				for r := range rounds {
					add(b, *benchEvents, "bench.horizon")
					got := drainRoundOrdered(b, tb, *benchEvents, ordering)
					b.Logf("%s round %d: %.0f events/s, mean claim %s, CPU per event: database %.1f µs, relay %.1f µs",
						name, r+1, got.rate, got.claim.Round(10*time.Microsecond), got.dbCPU, got.relayCPU)
					if r == 0 || got.rate < worst {
						worst = got.rate
					}
				}
				b.ReportMetric(worst, "slowest-round-events/s")
			}
		})
	}
}

// BenchmarkStaleStats drains a burst of -events into null:// on a table
// whose statistics lag it: never analysed, or analysed while empty,
// beside one analysed after the burst. A claim whose plan depends on the
// statistics may read and sort every pending row; the goal is both stale
// cases at 0.8 of the analysed one or better.
func BenchmarkStaleStats(b *testing.B) {
	for _, c := range []struct {
		name          string
		before, after bool // analyse before or after the burst
	}{
		{"analysed", false, true},
		{"never-analysed", false, false},
		{"analysed-empty", true, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				tb := newBenchTable(b)
				if c.before {
					tb.analyze(b)
				}
				tb.add(b, *benchEvents, "bench.stats")
				if c.after {
					tb.analyze(b)
				}
				got := drainRound(b, tb, *benchEvents)
				b.Logf("%s: %.0f events/s, mean claim %s, CPU per event: database %.1f µs, relay %.1f µs",
					c.name, got.rate, got.claim.Round(10*time.Microsecond), got.dbCPU, got.relayCPU)
				b.ReportMetric(got.rate, "events/s")
				b.ReportMetric(got.dbCPU, "db-µs/event")
			}
		})
	}
}
