package chaos

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/natstest"
	"github.com/outbox-relay/relay/pkg/outbox"
)

// TestSIGKILLDuringADrainLosesNothing kills the relay process at random
// moments during a 50,000-event drain and starts it again each time, on
// each storage.
func TestSIGKILLDuringADrainLosesNothing(t *testing.T) {
	t.Parallel()
	for _, s := range chaosStorages {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			testSIGKILLDuringADrain(t, s.new(t))
		})
	}
}

func testSIGKILLDuringADrain(t *testing.T, tb chaosTable) {
	srv := natstest.Start(t)
	st := srv.Stream(t, jetstream.StreamConfig{Name: "CRASH", Subjects: []string{"crash.>"}, Duplicates: 10 * time.Minute})
	const n = 50_000
	tb.InsertN(t, n, "crash.event")
	env := append(tb.env(), "PUBLISHER_URL="+srv.URL(), "BATCH_SIZE=200")

	seed := uint64(time.Now().UnixNano())
	t.Logf("kill points seeded with %d", seed) // to replay a failure
	rnd := rand.New(rand.NewPCG(seed, 1))
	const kills = 5
	for i := range kills {
		// Kill it at a random point of its progress: after it delivered
		// a random number of events.
		target := tb.Counts(t)[outbox.StatusDelivered] + 1 + rnd.IntN(6000)
		p := startRelay(t, env...)
		eventually.True(t, 30*time.Second, func() bool { return tb.Counts(t)[outbox.StatusDelivered] >= target },
			func() string { return fmt.Sprintf("%d deliveries before kill %d; log:\n%s", target, i+1, p.Log()) })
		p.kill(t)
	}
	if tb.Counts(t)[outbox.StatusDelivered] == n {
		t.Fatal("the drain finished before the last kill; raise n")
	}

	p := startRelay(t, env...)
	waitFor(t, tb, 2*time.Minute, map[outbox.Status]int{outbox.StatusDelivered: n}, p)
	p.stop(t)

	if got := natstest.Count(t, st); got != n {
		t.Fatalf("stream holds %d messages, want %d", got, n)
	}
	// Only events whose lease a kill left behind were taken back, each with
	// one attempt counted; a batch in flight is at most BATCH_SIZE events
	// and the relay holds at most MAX_IN_FLIGHT_BATCHES (4) of them.
	reaped := tb.retried(t)
	if most := int64(kills * 4 * 200); reaped > most {
		t.Errorf("%d events were taken back after %d kills, more than %d in flight could explain", reaped, kills, most)
	}
	t.Logf("%d kills: %d events were re-published from batches in flight at a kill; JetStream dropped the copies", kills, reaped)
}

// waitFor waits for the table's status counts to be want, reporting the
// relay's log if they never are.
func waitFor(t *testing.T, tb counter, timeout time.Duration, want map[outbox.Status]int, p *relayProc) {
	t.Helper()
	var got map[outbox.Status]int
	eventually.True(t, timeout, func() bool {
		p.requireRunning(t)
		got = tb.Counts(t)
		if len(got) != len(want) {
			return false
		}
		for s, n := range want {
			if got[s] != n {
				return false
			}
		}
		return true
	}, func() string {
		return "counts " + fmtCounts(got) + ", want " + fmtCounts(want) + "; relay log:\n" + tail(p.Log(), 3000)
	})
}
