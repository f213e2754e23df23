package relay_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/internal/harness/mysqltest"
	"github.com/outbox-relay/relay/internal/mycluster"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/relay"
)

// `make bench MODE=binlog` runs BenchmarkBinlog: CAPTURE=poll against
// CAPTURE=binlog on one private MariaDB with its binary log on (both
// modes pay for the log; only the relay differs).

var (
	binlogEvents = flag.Int("binlog.events", 50_000,
		"events BenchmarkBinlog's cost phase produces (in transactions of 100)")
	binlogLatencyEvents = flag.Int("binlog.latency.events", 3_000,
		"single-event transactions BenchmarkBinlog's latency phase commits, 100 a second")
)

// binlogRun is one run's figures.
type binlogRun struct {
	events  int
	elapsed time.Duration // first insert to last delivery
	db      time.Duration // the server's CPU over the run
	p50     time.Duration // latency phase: commit to publish
	p99     time.Duration
}

func (r binlogRun) rate() float64 { return float64(r.events) / r.elapsed.Seconds() }

// BenchmarkBinlog compares CAPTURE=poll (POLL_INTERVAL 500 ms, the default)
// with CAPTURE=binlog, each on a fresh outbox table of one private
// MariaDB, to a publisher that only notes arrivals:
//
//   - cost: one producer commits -binlog.events events in transactions of
//     100 as fast as it can while the relay runs; the drain rate (first
//     insert to last delivery) and the server's CPU per event (mariadbd,
//     all threads), and the same with no relay, which the relaying share
//     subtracts;
//   - latency: 100 single-event transactions a second, from the start of
//     each (its INSERT and COMMIT take about a millisecond here) to
//     publish, p50 and p99.
func BenchmarkBinlog(b *testing.B) {
	c := mycluster.Start(b, mycluster.Options{})
	runs := map[string]binlogRun{}
	for _, mode := range []string{"producer-only", "poll", "binlog"} {
		b.Run("cost/"+mode, func(b *testing.B) {
			var r binlogRun
			for range b.N {
				r = binlogCost(b, c, mode, *binlogEvents)
			}
			runs["cost/"+mode] = r
			b.ReportMetric(r.rate(), "events/s")
			b.ReportMetric(perEvent(r.db, r.events), "db-µs/event")
			b.ReportMetric(0, "ns/op")
		})
	}
	for _, mode := range []string{"poll", "binlog"} {
		b.Run("latency/"+mode, func(b *testing.B) {
			var r binlogRun
			for range b.N {
				r = binlogLatency(b, c, mode, *binlogLatencyEvents)
			}
			runs["latency/"+mode] = r
			b.ReportMetric(ms(r.p50), "p50-ms")
			b.ReportMetric(ms(r.p99), "p99-ms")
			b.ReportMetric(0, "ns/op")
		})
	}
	printBinlog(os.Stdout, runs)
}

// serverCPUOf reads the private server's CPU time.
func serverCPUOf(c *mycluster.Cluster) time.Duration {
	return processCPU(strconv.Itoa(c.PID()))
}

// threadCPU reads the CPU time of each of the server's threads (one per
// connection: the binlog dump thread among them).
func threadCPU(c *mycluster.Cluster) map[string]time.Duration {
	pid := strconv.Itoa(c.PID())
	tasks, _ := os.ReadDir("/proc/" + pid + "/task")
	out := make(map[string]time.Duration, len(tasks))
	for _, t := range tasks {
		out[t.Name()] = processCPU(pid + "/task/" + t.Name())
	}
	return out
}

// busiest logs the three threads that spent the most CPU between two
// readings, per event.
func busiest(b *testing.B, mode string, before, after map[string]time.Duration, n int) {
	type spent struct {
		tid string
		cpu time.Duration
	}
	var all []spent
	for tid, cpu := range after {
		all = append(all, spent{tid, cpu - before[tid]})
	}
	slices.SortFunc(all, func(x, y spent) int { return int(y.cpu - x.cpu) })
	for _, s := range all[:min(3, len(all))] {
		b.Logf("%s: server thread %s %.1f µs/event", mode, s.tid, perEvent(s.cpu, n))
	}
}

// startBenchRelay runs a relay in mode on tb until the returned stop.
func startBenchRelay(b *testing.B, tb *mysqltest.Table, mode string, pub *arrivals) (stop func()) {
	b.Helper()
	if mode == "producer-only" {
		return func() {}
	}
	cfg := relay.Config{RelayID: "bench-" + mode, Logger: testLogger()}
	e, err := relay.New(cfg, tb.Store, pub)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); e.Run(ctx) }()
	if mode == "binlog" {
		bt := &binlogTable{Table: tb}
		capt, err := relay.NewCapture(e, bt.source(cfg.RelayID), tb.Store, relay.CaptureConfig{Mode: "binlog", Position: "binlog position"})
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = capt.Run(ctx) }()
		deadline := time.Now().Add(30 * time.Second)
		for st, _ := capt.Status(); st != relay.CaptureStreaming; st, _ = capt.Status() {
			if time.Now().After(deadline) {
				b.Fatalf("the binlog stream did not start: %s", st)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return func() { cancel(); wg.Wait() }
}

func binlogCost(b *testing.B, c *mycluster.Cluster, mode string, n int) binlogRun {
	b.Helper()
	tb := mysqltest.NewAt(b, c.URL(""))
	pub := newArrivals()
	stop := startBenchRelay(b, tb, mode, pub)
	defer stop()
	const per = 100
	db0, threads0 := serverCPUOf(c), threadCPU(c)
	start := time.Now()
	var all []uuid.UUID
	for len(all) < n {
		all = append(all, tb.InsertN(b, min(per, n-len(all)), "bench.binlog")...)
	}
	if mode != "producer-only" {
		deadline := time.Now().Add(drainTimeout)
		for ok, _ := pub.got(all); !ok; ok, _ = pub.got(all) {
			if time.Now().After(deadline) {
				b.Fatalf("%s: not every event was delivered", mode)
			}
			time.Sleep(5 * time.Millisecond)
		}
		// Settled too, so that the server's work for them is counted.
		for tb.Counts(b)[outbox.StatusDelivered] < n {
			if time.Now().After(deadline) {
				b.Fatalf("%s: not every event was settled", mode)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	busiest(b, mode, threads0, threadCPU(c), n)
	return binlogRun{events: n, elapsed: time.Since(start), db: serverCPUOf(c) - db0}
}

func binlogLatency(b *testing.B, c *mycluster.Cluster, mode string, n int) binlogRun {
	b.Helper()
	tb := mysqltest.NewAt(b, c.URL(""))
	pub := newArrivals()
	stop := startBenchRelay(b, tb, mode, pub)
	defer stop()
	commits := make(map[uuid.UUID]time.Time, n)
	start := time.Now()
	for i := range n {
		time.Sleep(time.Until(start.Add(time.Duration(i) * 10 * time.Millisecond)))
		// From before the INSERT: the log may hand the event to the
		// relay before the server's answer to its COMMIT reaches the
		// producer (the binary log is written first), so the time after
		// it is no bound.
		sent := time.Now()
		id := tb.Insert(b, mysqltest.Event{})[0]
		commits[id] = sent
	}
	deadline := time.Now().Add(time.Minute)
	var lat []time.Duration
	for id, at := range commits {
		var got time.Time
		for ok := false; !ok; got, ok = pub.at(id) {
			if time.Now().After(deadline) {
				b.Fatalf("%s: event %s never arrived", mode, id)
			}
			time.Sleep(time.Millisecond)
		}
		lat = append(lat, got.Sub(at))
	}
	slices.Sort(lat)
	return binlogRun{events: n, p50: lat[len(lat)/2], p99: lat[len(lat)*99/100]}
}

func printBinlog(w io.Writer, runs map[string]binlogRun) {
	prod := runs["cost/producer-only"]
	var sb strings.Builder
	fmt.Fprintf(&sb, "\nBenchmarkBinlog (private MariaDB, log_bin on, ROW):\n")
	fmt.Fprintf(&sb, "%-10s %12s %14s %20s\n", "mode", "events/s", "db-µs/event", "relaying-db-µs/event")
	for _, m := range []string{"poll", "binlog"} {
		r := runs["cost/"+m]
		if r.events == 0 {
			continue
		}
		fmt.Fprintf(&sb, "%-10s %12.0f %14.1f %20.1f\n", m, r.rate(), perEvent(r.db, r.events), perEvent(r.db-prod.db, r.events))
	}
	for _, m := range []string{"poll", "binlog"} {
		if r := runs["latency/"+m]; r.events > 0 {
			fmt.Fprintf(&sb, "latency %-7s p50 %6.1f ms  p99 %6.1f ms\n", m, ms(r.p50), ms(r.p99))
		}
	}
	fmt.Fprint(w, sb.String())
}
