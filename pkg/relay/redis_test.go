package relay_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/internal/harness/redistest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	_ "github.com/outbox-relay/relay/pkg/publisher/redis" // registers redis://
	"github.com/outbox-relay/relay/pkg/relay"
)

// openRedis opens the driver on rawURL and closes it at the end of the test.
func openRedis(t testing.TB, rawURL string) publisher.Publisher {
	t.Helper()
	pub, err := publisher.Open(context.Background(), rawURL)
	if err != nil {
		t.Fatalf("open redis publisher: %v", err)
	}
	t.Cleanup(func() { _ = pub.Close(context.Background()) })
	return pub
}

func TestRedisDeliversEveryEventOnceWithFields(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	admin := redistest.Shared(t)
	prefix := redistest.Prefix(t, admin)

	const n = 1200
	events := make([]pgtest.Event, n)
	for i := range events {
		events[i] = pgtest.Event{
			Type:         "orders.created",
			PartitionKey: fmt.Sprintf("customer-%d", i%7),
			Payload:      pgtest.Payload(i, 200),
			Headers:      fmt.Sprintf(`{"tenant":"acme","seq":%d,"replayed":false}`, i),
		}
		if i%10 == 9 {
			events[i].PartitionKey = "" // NULL partition_key
		}
	}
	ids := tb.Insert(t, events...)

	start(t, relay.Config{BatchSize: 100}, tb.Store, openRedis(t, redistest.URL()+"?stream_prefix="+prefix))
	waitCounts(t, tb, 30*time.Second, map[outbox.Status]int{outbox.StatusDelivered: n})

	// Every event was acknowledged, so every entry is in the stream by now.
	entries := redistest.Entries(t, admin, prefix+"orders.created", 0)
	if len(entries) != n {
		t.Fatalf("stream holds %d entries, want %d", len(entries), n)
	}
	byID := map[string]int{}
	for i, id := range ids {
		byID[id.String()] = i
	}
	for _, m := range entries {
		id := redistest.Field(m, "id")
		i, ok := byID[id]
		if !ok {
			t.Fatalf("entry %s: id %q is none of the events, or arrived twice", m.ID, id)
		}
		delete(byID, id)
		e := events[i]
		want := map[string]any{
			"id":         id,
			"payload":    string(e.Payload),
			"h:tenant":   "acme",
			"h:seq":      strconv.Itoa(i),
			"h:replayed": "false",
		}
		if e.PartitionKey != "" {
			want["partition_key"] = e.PartitionKey
		}
		if fmt.Sprint(m.Values) != fmt.Sprint(want) {
			t.Fatalf("event %d arrived as %v, want %v", i, m.Values, want)
		}
	}
}

func TestRedisKeepsPartitionKeyOrderWithinABatch(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	admin := redistest.Shared(t)
	prefix := redistest.Prefix(t, admin)

	const n = 300
	events := make([]pgtest.Event, n)
	for i := range events {
		events[i] = pgtest.Event{Type: "ordered", PartitionKey: fmt.Sprintf("k%d", i%5), Payload: []byte(strconv.Itoa(i))}
	}
	// One transaction: only insertion order tells the rows apart.
	ids := tb.Insert(t, events...)

	start(t, relay.Config{BatchSize: n, MaxInFlightBatches: 1}, tb.Store, openRedis(t, redistest.URL()+"?stream_prefix="+prefix))
	waitCounts(t, tb, 30*time.Second, map[outbox.Status]int{outbox.StatusDelivered: n})

	pos := map[string]int{}
	for i, id := range ids {
		pos[id.String()] = i
	}
	last := map[string]int{}
	entries := redistest.Entries(t, admin, prefix+"ordered", n)
	if len(entries) != n {
		t.Fatalf("stream holds %d entries, want %d", len(entries), n)
	}
	for _, m := range entries {
		i, ok := pos[redistest.Field(m, "id")]
		if !ok {
			t.Fatalf("entry %s is none of the events written", m.ID)
		}
		key := redistest.Field(m, "partition_key")
		if prev, ok := last[key]; ok && i < prev {
			t.Fatalf("key %s: event %d reached the stream after event %d", key, i, prev)
		}
		last[key] = i
	}
}

func TestRedisRefusedEventsGoDeadWhileTheRestFlow(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	admin := redistest.Shared(t)
	prefix := redistest.Prefix(t, admin)
	if err := admin.Set(context.Background(), prefix+"orders.legacy", "a string, not a stream", 0).Err(); err != nil {
		t.Fatal(err)
	}

	good := tb.InsertN(t, 200, "orders.created")
	bad := tb.Insert(t,
		pgtest.Event{Type: "orders.legacy"},
		pgtest.Event{Type: "orders.created", Headers: `{"tags":["a","b"]}`},
		pgtest.Event{Type: "orders.created", Payload: make([]byte, 4096)},
	)
	wantErr := []string{`stream "` + prefix + `orders.legacy": the key holds a value that is not a stream`,
		`header "tags"`, "entry too large"}

	start(t, relay.Config{BatchSize: 50, Retry: relay.RetryPolicy{MaxAttempts: 25}}, tb.Store,
		openRedis(t, redistest.URL()+"?stream_prefix="+prefix+"&max_entry_bytes=1024"))
	waitCounts(t, tb, 30*time.Second, map[outbox.Status]int{outbox.StatusDelivered: len(good), outbox.StatusDead: len(bad)})

	for i, id := range bad {
		row := tb.Get(t, id)
		if row.Attempts != 1 {
			t.Errorf("dead event %d has %d attempts, want 1 (permanent errors are not retried)", i, row.Attempts)
		}
		if !strings.Contains(row.LastError, wantErr[i]) {
			t.Errorf("dead event %d last_error = %q, want it to mention %q", i, row.LastError, wantErr[i])
		}
	}
	if got := admin.XLen(context.Background(), prefix+"orders.created").Val(); got != int64(len(good)) {
		t.Errorf("stream holds %d entries, want the %d good events", got, len(good))
	}
}

func TestRedisRestartMidDrainSendsNothingDead(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	// A server of the test's own, shut down (saving its data) and started
	// again mid-drain.
	srv := redistest.Start(t)
	const n = 20000
	ids := tb.InsertN(t, n, "outage.event")

	pub := openRedis(t, srv.URL()+"?read_timeout=2s&write_timeout=2s&dial_timeout=2s")
	drainThroughOutage(t, tb, n, pub, func() { srv.Stop(t) }, func() { srv.Start(t) })
	// Redis keeps no record of what it has seen: a batch cut off by the
	// shutdown may be in the stream and be sent again. Every event must be
	// there at least once.
	entries := redistest.Entries(t, redistest.Client(t, srv.URL()), "outage.event", n)
	copies := map[string]int{}
	for _, m := range entries {
		copies[redistest.Field(m, "id")]++
	}
	for i, id := range ids {
		if copies[id.String()] == 0 {
			t.Fatalf("event %d (%s) is DELIVERED but not in the stream", i, id)
		}
	}
	if len(copies) != n {
		t.Errorf("stream holds %d distinct events, want %d", len(copies), n)
	}
	t.Logf("%d entries for %d events after the restart", len(entries), n)
}
