package chaos

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/amqptest"
	"github.com/outbox-relay/relay/internal/harness/kafkatest"
	"github.com/outbox-relay/relay/internal/harness/natstest"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/internal/tcpproxy"
	"github.com/outbox-relay/relay/pkg/outbox"
)

// outageBroker is a broker the test can take away and bring back, with a
// way to count the distinct events it holds.
type outageBroker struct {
	publisherURL string
	eventType    string
	stop, start  func()
	distinct     func(t *testing.T) int
}

// outageLength is how long each broker stays away.
const outageLength = 10 * time.Second

// TestTenSecondBrokerOutage takes each broker away for ten seconds in the
// middle of a drain, with RETRY_MAX_ATTEMPTS=2 so that an outage counted
// against the events would kill them: nothing may go DEAD, no attempt may be
// burned, and delivery must resume within seconds of the broker's return.
func TestTenSecondBrokerOutage(t *testing.T) {
	t.Parallel()
	brokers := map[string]func(t *testing.T) outageBroker{
		"nats": func(t *testing.T) outageBroker {
			srv := natstest.Start(t)
			st := srv.Stream(t, jetstream.StreamConfig{Name: "OUTAGE", Subjects: []string{"outage.>"}, Duplicates: 10 * time.Minute})
			return outageBroker{
				publisherURL: srv.URL() + "?timeout=2s", eventType: "outage.event",
				stop: srv.Stop, start: func() { srv.Restart() },
				distinct: func(t *testing.T) int { return int(natstest.Count(t, st)) }, // deduplicated by Msg-Id
			}
		},
		"kafka": func(t *testing.T) outageBroker {
			c := kafkatest.Start(t)
			c.CreateTopic(t, "outage", 3, nil)
			return outageBroker{
				publisherURL: c.URL("?topic=outage&timeout=2s"), eventType: "outage.event",
				stop: c.Stop, start: func() { c.Start(t) },
				distinct: func(t *testing.T) int {
					ids := map[string]bool{}
					for _, r := range c.AllRecords(t, "outage") {
						ids[kafkatest.Header(r, outbox.HeaderEventID)] = true
					}
					return len(ids)
				},
			}
		},
		"amqp": func(t *testing.T) outageBroker {
			ch := amqptest.Channel(t)
			exchange := amqptest.Exchange(t, ch, "topic")
			queue := amqptest.BoundQueue(t, ch, exchange, "#")
			proxy := tcpproxy.Start(t, amqptest.Host(t))
			return outageBroker{
				publisherURL: amqptest.DriverURL(proxy.Addr(), "exchange="+exchange+"&timeout=2s"), eventType: "outage.event",
				stop: proxy.Down, start: proxy.Up,
				distinct: func(t *testing.T) int {
					ids := map[string]bool{}
					for _, m := range amqptest.Drain(t, queue, 0) {
						ids[m.MessageId] = true
					}
					return len(ids)
				},
			}
		},
	}
	for name, setUp := range brokers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setUp(t)
			tb := pgtest.New(t)
			const n = 20_000
			tb.InsertN(t, n, b.eventType)
			p := startRelay(t, "STORAGE_URL="+pgtest.URL(), "STORAGE_TABLE_NAME="+tb.Name, "PUBLISHER_URL="+b.publisherURL,
				"BATCH_SIZE=100", "MAX_IN_FLIGHT_BATCHES=2", "RETRY_MAX_ATTEMPTS=2")

			eventually.True(t, time.Minute, func() bool {
				p.requireRunning(t)
				return tb.Counts(t)[outbox.StatusDelivered] >= n/10
			},
				func() string { return "deliveries before the outage; log:\n" + tail(p.Log(), 3000) })
			b.stop()
			// The outage lasts a fixed time: that is the fault being injected.
			<-time.After(outageLength)
			before := tb.Counts(t)
			if before[outbox.StatusDelivered] == n {
				t.Fatal("the backlog drained before the outage; raise n")
			}
			b.start()
			back := time.Now()
			eventually.True(t, time.Minute, func() bool { return tb.Counts(t)[outbox.StatusDelivered] > before[outbox.StatusDelivered] },
				func() string { return "deliveries after the broker came back; log:\n" + tail(p.Log(), 3000) })
			resumed := time.Since(back)
			// Claiming pauses 1 s, 2 s, 4 s, 8 s … between broker checks, so
			// after a 10 s outage the next check comes within about 8 s.
			if resumed > 20*time.Second {
				t.Errorf("delivery resumed %s after the broker came back, want within seconds", resumed.Round(time.Second))
			}

			waitFor(t, tb, 2*time.Minute, map[outbox.Status]int{outbox.StatusDelivered: n}, p)
			p.requireRunning(t)
			if burned := tb.Exec(t, "SELECT 1 FROM {{table}} WHERE attempts > 0"); burned != 0 {
				t.Errorf("%d events had an attempt counted for the outage", burned)
			}
			if got := b.distinct(t); got != n {
				t.Errorf("the broker holds %d distinct events, want %d", got, n)
			}
			if !strings.Contains(p.Log(), "broker unavailable") {
				t.Errorf("the relay never logged the outage:\n%s", tail(p.Log(), 2000))
			}
			t.Logf("%s: delivery resumed %s after a %s outage", name, resumed.Round(100*time.Millisecond), outageLength)
		})
	}
}

// TestFourRelaysShareATable runs four relay processes on one table and
// counts what each published: everything exactly once, since none crashed.
func TestFourRelaysShareATable(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	const n = 40_000
	tb.InsertN(t, n, "four.event")
	procs := make([]*relayProc, 4)
	for i := range procs {
		procs[i] = startRelay(t, "STORAGE_URL="+pgtest.URL(), "STORAGE_TABLE_NAME="+tb.Name,
			"PUBLISHER_URL=stdout://", fmt.Sprintf("RELAY_ID=relay-%d", i), "BATCH_SIZE=200")
	}
	waitFor(t, tb, 2*time.Minute, map[outbox.Status]int{outbox.StatusDelivered: n}, procs[0])
	sends := map[string]int{}
	var busy int
	for _, p := range procs {
		p.stop(t)
		lines := 0
		for _, line := range strings.Split(p.Log(), "\n") {
			if id, ok := eventID(line); ok {
				sends[id]++
				lines++
			}
		}
		if lines > 0 {
			busy++
		}
	}
	duplicates := 0
	for _, c := range sends {
		duplicates += c - 1
	}
	if len(sends) != n || duplicates != 0 {
		t.Fatalf("%d distinct events published with %d duplicates; want %d and 0", len(sends), duplicates, n)
	}
	if busy < 2 {
		t.Errorf("only %d of 4 relays published anything", busy)
	}
	t.Logf("4 relays: %d events, %d duplicates, %d relays shared the work", len(sends), duplicates, busy)
}

// eventID picks the event id out of a stdout:// line.
func eventID(line string) (string, bool) {
	const key = `{"event_id":"`
	if !strings.HasPrefix(line, key) || len(line) < len(key)+36 {
		return "", false
	}
	return line[len(key) : len(key)+36], true
}
