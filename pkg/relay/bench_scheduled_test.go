package relay_test

import (
	"flag"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/relay"
	"github.com/outbox-relay/relay/pkg/storage"
)

var (
	scheduledEvents = flag.Int("scheduled.events", 200, "scheduled events the scheduled benchmark inserts")
	scheduledRate   = flag.Int("scheduled.rate", 20, "single-event transactions per second in the scheduled benchmark")
	scheduledPoll   = flag.Duration("scheduled.poll", relay.PollIntervalDefault, "POLL_INTERVAL in the scheduled benchmark")
)

// pollOnly hides the storage's DueWatcher (and keeps its held claims), as
// the relay was before it asked when the next row comes due.
type pollOnly struct {
	storage.Queue
	storage.HeldQueue
}

// BenchmarkScheduledNATS inserts, at a trickle of -scheduled.rate single-event
// transactions per second, events due 50 ms to 1 s later, and reports how
// long after coming due the broker acknowledged them (PostgreSQL, which
// notifies). "poll" is the relay that finds them only by polling; "due"
// the one that asks when the next row comes due. The due times are taken
// by this process's clock, which the database shares here.
func BenchmarkScheduledNATS(b *testing.B) {
	for _, mode := range []string{"poll", "due"} {
		b.Run(mode, func(b *testing.B) {
			tb := pgtest.New(b)
			var store storage.Queue = tb.Store
			if mode == "poll" {
				store = pollOnly{tb.Store, tb.Store}
			}
			clock, stop := trickleRelay(b, store, tb.Store, "scheduled", *scheduledPoll)
			defer stop()

			due := map[string]time.Time{}
			b.ResetTimer()
			for n := range b.N {
				tick := time.NewTicker(time.Second / time.Duration(*scheduledRate))
				for i := range *scheduledEvents {
					<-tick.C
					typ := "scheduled.e" + strconv.Itoa(n*(*scheduledEvents)+i)
					at := time.Now().Add(50*time.Millisecond + rand.N(950*time.Millisecond))
					tb.Exec(b, "INSERT INTO {{table}} (event_type, payload, available_at) VALUES ($1, $2, $3)",
						typ, pgtest.Payload(0, 200), at)
					due[typ] = at
				}
				tick.Stop()
			}
			total := *scheduledEvents * b.N
			eventually.True(b, time.Minute, func() bool { return tb.Counts(b)[outbox.StatusDelivered] == total },
				func() string { return "every event delivered" })
			b.StopTimer()
			ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
			sinceDue := clock.sinceCommit(due)
			b.ReportMetric(ms(percentile(sinceDue, 0.50)), "due-p50-ms")
			b.ReportMetric(ms(percentile(sinceDue, 0.99)), "due-p99-ms")
			b.ReportMetric(ms(percentile(sinceDue, 1)), "due-max-ms")
			b.ReportMetric(0, "ns/op")
		})
	}
}
