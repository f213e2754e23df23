package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/natstest"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/outbox"
)

// TestInboxAppliesEachEventOnceAfterRelayCrashes is the end-to-end claim:
// the relay is SIGKILLed mid-batch, so the stream holds some events twice
// (its duplicate window is JetStream's smallest, far shorter than the
// lease after which the relay publishes them again); the example consumer
// reads the stream with two processes, one of them SIGKILLed halfway so
// that JetStream redelivers what it had not acknowledged; and the
// consumer's table holds every event's effect exactly once.
func TestInboxAppliesEachEventOnceAfterRelayCrashes(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	space, _, _ := strings.Cut(tb.Name, ".")
	srv := natstest.Start(t)
	st := srv.Stream(t, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, Duplicates: 100 * time.Millisecond})

	// Each event adds a distinct amount to one of seven customers, so a
	// lost event and a doubled one cannot hide each other in the sums.
	const n = 6000
	events := make([]pgtest.Event, n)
	wantOrders, wantCents := map[string]int{}, map[string]int{}
	for i := range events {
		customer := fmt.Sprintf("customer-%d", i%7)
		events[i] = pgtest.Event{Type: "orders.paid",
			Payload: fmt.Appendf(nil, `{"order_id":%d,"customer":%q,"amount_cents":%d}`, i, customer, i+1)}
		wantOrders[customer]++
		wantCents[customer] += i + 1
	}
	ids := tb.Insert(t, events...)

	// Kill the relay mid-drain until some kill caught events published but
	// not yet marked delivered: their leases expire and the relay
	// publishes them again, after the duplicate window.
	env := []string{"STORAGE_URL=" + pgtest.URL(), "STORAGE_TABLE_NAME=" + tb.Name, "PUBLISHER_URL=" + srv.URL(), "BATCH_SIZE=100"}
	seed := uint64(time.Now().UnixNano())
	t.Logf("kill points seeded with %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 2))
	published := newStreamIDs(st)
	kills, caught := 0, 0
	for kills < 3 || caught == 0 {
		// A kill catches a batch between publish and settle about one time
		// in four: twenty misses in a row come about once in 300 runs.
		if kills == 20 {
			t.Fatalf("no kill in %d caught a batch between publish and settle", kills)
		}
		delivered := tb.Counts(t)[outbox.StatusDelivered]
		if delivered > n-600 {
			t.Fatalf("the drain is nearly over after %d kills without a duplicate; raise n", kills)
		}
		target := delivered + 1 + rnd.IntN(150)
		p := startRelay(t, env...)
		eventually.True(t, 30*time.Second, func() bool { return tb.Counts(t)[outbox.StatusDelivered] >= target },
			func() string { return fmt.Sprintf("%d deliveries before kill %d; log:\n%s", target, kills+1, p.Log()) })
		p.kill(t)
		kills++
		// A settle the killed relay sent may still be running in its
		// server process, and commits there: count once it has ended, or
		// events it delivers would be taken for ones left behind.
		eventually.True(t, 30*time.Second, func() bool {
			return tb.Exec(t, `SELECT 1 FROM pg_stat_activity
			WHERE state = 'active' AND pid <> pg_backend_pid() AND strpos(query, $1) > 0`, `"`+space+`"`) == 0
		},
			func() string { return "the killed relay's statements to end" })
		if inFlight := published.distinct(t) - tb.Counts(t)[outbox.StatusDelivered]; inFlight > 0 {
			caught++
			t.Logf("kill %d: %d events in the stream but not marked delivered", kills, inFlight)
		}
	}
	p := startRelay(t, env...)
	waitFor(t, tb, 2*time.Minute, map[outbox.Status]int{outbox.StatusDelivered: n}, p)
	p.stop(t)
	inStream := int(natstest.Count(t, st))
	if inStream <= n {
		t.Fatalf("the stream holds %d messages for %d events: no duplicate reached it", inStream, n)
	}
	t.Logf("%d kills left %d duplicates in the stream", kills, inStream-n)

	// Two consumer processes share the durable consumer; one is killed
	// once it has applied a third of the events.
	consumer := buildConsumer(t)
	args := []string{"-db", pgtest.URL() + "&search_path=" + space, "-nats", srv.URL(), "-stream", "ORDERS",
		"-durable", "billing", "-ack-wait", "2s"}
	a, b := startProcess(t, exec.Command(consumer, args...)), startProcess(t, exec.Command(consumer, args...))
	db, err := sql.Open("pgx", pgtest.URL()+"&search_path="+space)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	records := func() int {
		var n int
		if err := db.QueryRow("SELECT count(*) FROM inbox WHERE consumer = 'billing'").Scan(&n); err != nil {
			return -1 // the consumer has not created its table yet
		}
		return n
	}
	eventually.True(t, time.Minute, func() bool { return records() >= n/3 },
		func() string {
			return fmt.Sprintf("%d of %d events applied; logs:\n%s\n%s", records(), n, tail(a.Log(), 2000), tail(b.Log(), 2000))
		})
	a.kill(t)
	_, js := srv.Connect(t)
	eventually.True(t, 2*time.Minute, func() bool {
		b.requireRunning(t)
		cons, err := js.Consumer(context.Background(), "ORDERS", "billing")
		if err != nil {
			return false
		}
		info, err := cons.Info(context.Background())
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0 && records() >= n
	}, func() string {
		return fmt.Sprintf("%d of %d events applied; log:\n%s", records(), n, tail(b.Log(), 3000))
	})
	b.stop(t)

	// Every event's effect, once.
	if got := records(); got != n {
		t.Errorf("the inbox holds %d records for %d events", got, n)
	}
	rows, err := db.Query("SELECT customer, orders, amount_cents FROM example_revenue")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	customers := 0
	for rows.Next() {
		var c string
		var orders, cents int
		if err := rows.Scan(&c, &orders, &cents); err != nil {
			t.Fatal(err)
		}
		customers++
		if orders != wantOrders[c] || cents != wantCents[c] {
			t.Errorf("%s: %d orders, %d cents; want %d and %d", c, orders, cents, wantOrders[c], wantCents[c])
		}
	}
	if customers != len(wantOrders) {
		t.Errorf("revenue for %d customers, want %d", customers, len(wantOrders))
	}
	var matched int
	if err := db.QueryRow("SELECT count(*) FROM inbox JOIN openoutbox_events o ON o.event_id::text = inbox.event_id WHERE consumer = 'billing'").Scan(&matched); err != nil || matched != len(ids) {
		t.Errorf("%d inbox records name an outbox event (%v), want %d", matched, err, len(ids))
	}
	skipped := strings.Count(a.Log(), "duplicate skipped") + strings.Count(b.Log(), "duplicate skipped")
	if skipped == 0 {
		t.Error("the consumers skipped no duplicate, so the test proved nothing")
	}
	t.Logf("the consumers skipped %d duplicate deliveries", skipped)
}

// streamIDs counts the distinct event ids in a stream, reading only the
// messages added since it last looked.
type streamIDs struct {
	st   jetstream.Stream
	next uint64
	seen map[string]bool
}

func newStreamIDs(st jetstream.Stream) *streamIDs {
	return &streamIDs{st: st, next: 1, seen: map[string]bool{}}
}

func (s *streamIDs) distinct(t *testing.T) int {
	t.Helper()
	ctx := context.Background()
	info, err := s.st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for ; s.next <= info.State.LastSeq; s.next++ {
		m, err := s.st.GetMsg(ctx, s.next)
		if err != nil {
			t.Fatalf("get message %d: %v", s.next, err)
		}
		s.seen[m.Header.Get(outbox.HeaderEventID)] = true
	}
	return len(s.seen)
}

// buildConsumer builds examples/consumer for this test.
func buildConsumer(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "consumer")
	build := exec.Command("go", "build", "-o", bin, "../../examples/consumer")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build examples/consumer: %v\n%s", err, out)
	}
	return bin
}
