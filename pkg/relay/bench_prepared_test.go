package relay_test

import (
	"flag"
	"strconv"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/internal/pgcluster"
	"github.com/outbox-relay/relay/pkg/outbox"
)

var preparedGap = flag.Duration("prepared.gap", 10*time.Millisecond,
	"time between PREPARE TRANSACTION and COMMIT PREPARED in the two-phase latency benchmark: a transaction manager's round trip and log write")

// BenchmarkLatencyPrepared is BenchmarkLatencyNATS for a two-phase
// producer on a private cluster with max_prepared_transactions: one event
// per transaction at -latency.rate per second, each with outbox.notify
// off, PREPARE TRANSACTION, -prepared.gap, COMMIT PREPARED. No
// notification can wake the relay; its listener watches the prepared
// transactions. It reports COMMIT PREPARED → acknowledgement percentiles.
func BenchmarkLatencyPrepared(b *testing.B) {
	c := pgcluster.Start(b, pgcluster.Options{Settings: []string{"max_prepared_transactions = 10"}})
	tb := pgtest.NewAt(b, c.URL(c.CreateDatabase(b)))
	clock, stop := trickleRelay(b, tb.Store, tb.Store, "prepared", *latencyPoll)
	defer stop()

	committed := map[string]time.Time{}
	b.ResetTimer()
	for n := range b.N {
		tick := time.NewTicker(time.Second / time.Duration(*latencyRate))
		for i := range *latencyEvents {
			<-tick.C
			typ := "prepared.e" + strconv.Itoa(n*(*latencyEvents)+i)
			gid := "g-" + typ
			tb.Exec(b, "BEGIN; SET LOCAL outbox.notify = off; "+
				"INSERT INTO {{table}} (event_type, payload) VALUES ('"+typ+"', 'x'); PREPARE TRANSACTION '"+gid+"'")
			time.Sleep(*preparedGap)
			tb.Exec(b, "COMMIT PREPARED '"+gid+"'")
			committed[typ] = time.Now()
		}
		tick.Stop()
	}
	total := *latencyEvents * b.N
	eventually.True(b, time.Minute, func() bool { return tb.Counts(b)[outbox.StatusDelivered] == total },
		func() string { return "every event delivered" })
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	fromCommit := clock.sinceCommit(committed)
	b.ReportMetric(ms(percentile(fromCommit, 0.50)), "commit-p50-ms")
	b.ReportMetric(ms(percentile(fromCommit, 0.99)), "commit-p99-ms")
	b.ReportMetric(ms(percentile(fromCommit, 1)), "commit-max-ms")
	b.ReportMetric(0, "ns/op")
}
