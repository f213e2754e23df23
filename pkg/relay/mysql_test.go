package relay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/amqptest"
	"github.com/outbox-relay/relay/internal/harness/kafkatest"
	"github.com/outbox-relay/relay/internal/harness/mysqltest"
	"github.com/outbox-relay/relay/internal/harness/natstest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/reaper"
	"github.com/outbox-relay/relay/pkg/relay"
	"github.com/outbox-relay/relay/pkg/storage"
)

// The engine on MySQL (MariaDB in the tests) with an in-process NATS
// server: the same engine, a storage that polls instead of listening.

func TestMySQLDeliversEveryEventOnceWithHeaders(t *testing.T) {
	t.Parallel()
	tb := mysqltest.New(t)
	srv := natstest.Start(t)
	st := srv.Stream(t, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})

	const n = 1200
	events := make([]mysqltest.Event, n)
	for i := range events {
		events[i] = mysqltest.Event{
			Type:         "orders.created",
			PartitionKey: fmt.Sprintf("customer-%d", i%7),
			Payload:      mysqltest.Payload(i, 200),
			Headers:      fmt.Sprintf(`{"tenant":"acme","seq":%d,"replayed":false}`, i),
		}
		if i%10 == 9 {
			events[i].PartitionKey = "" // NULL partition_key
		}
	}
	ids := tb.Insert(t, events...)

	start(t, relay.Config{BatchSize: 100}, tb.Store, openNATS(t, srv, ""))
	waitCounts(t, tb, 30*time.Second, map[outbox.Status]int{outbox.StatusDelivered: n})

	byID := map[uuid.UUID]int{}
	for i, id := range ids {
		byID[id] = i
	}
	msgs := natstest.Messages(t, st)
	if len(msgs) != n {
		t.Fatalf("stream holds %d messages, want %d", len(msgs), n)
	}
	seen := map[string]bool{}
	for _, m := range msgs {
		id := m.Header.Get("Nats-Msg-Id")
		i, known := byID[uuid.MustParse(id)]
		if !known || seen[id] {
			t.Fatalf("message with Nats-Msg-Id %q: known %v, seen before %v", id, known, seen[id])
		}
		seen[id] = true
		for k, want := range map[string]string{
			outbox.HeaderEventID:      id,
			outbox.HeaderEventType:    "orders.created",
			outbox.HeaderPartitionKey: events[i].PartitionKey,
			"tenant":                  "acme",
			"seq":                     fmt.Sprint(i),
			"replayed":                "false",
		} {
			if got := m.Header.Get(k); got != want {
				t.Fatalf("event %d header %s = %q, want %q", i, k, got, want)
			}
		}
		if string(m.Data) != string(events[i].Payload) || m.Subject != "orders.created" {
			t.Fatalf("event %d: subject %q payload %q", i, m.Subject, m.Data)
		}
	}
}

// MySQL to Kafka and to RabbitMQ: every event arrives once, with its id.
func TestMySQLDeliversToKafkaAndRabbitMQ(t *testing.T) {
	t.Parallel()
	const n = 500
	brokers := map[string]func(t *testing.T) (publisher.Publisher, func(t *testing.T) map[string]int){
		"kafka": func(t *testing.T) (publisher.Publisher, func(t *testing.T) map[string]int) {
			c := kafkatest.Start(t)
			c.CreateTopic(t, "mysql.events", 3, nil)
			return openKafka(t, c, "?topic=mysql.events"), func(t *testing.T) map[string]int {
				ids := map[string]int{}
				for _, r := range c.AllRecords(t, "mysql.events") {
					ids[kafkatest.Header(r, outbox.HeaderEventID)]++
				}
				return ids
			}
		},
		"amqp": func(t *testing.T) (publisher.Publisher, func(t *testing.T) map[string]int) {
			exchange, queue := amqpDestination(t, "mysql.*", nil)
			return openAMQP(t, "", exchange, ""), func(t *testing.T) map[string]int {
				ch := amqptest.Channel(t)
				ids := map[string]int{}
				for _, m := range amqptest.Consume(t, ch, queue, n) {
					ids[m.MessageId]++
				}
				return ids
			}
		},
	}
	for name, open := range brokers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tb := mysqltest.New(t)
			events := make([]mysqltest.Event, n)
			for i := range events {
				events[i] = mysqltest.Event{Type: "mysql.event", PartitionKey: fmt.Sprintf("k%d", i%5), Payload: mysqltest.Payload(i, 200)}
			}
			ids := tb.Insert(t, events...)
			pub, received := open(t)
			start(t, relay.Config{BatchSize: 100}, tb.Store, pub)
			waitCounts(t, tb, time.Minute, map[outbox.Status]int{outbox.StatusDelivered: n})
			got := received(t)
			if len(got) != n {
				t.Fatalf("%s holds %d distinct events, want %d", name, len(got), n)
			}
			for _, id := range ids {
				if got[id.String()] != 1 {
					t.Fatalf("event %s arrived %d times", id, got[id.String()])
				}
			}
		})
	}
}

// The ordering guarantee under fire on MySQL: three relays (two pools), a
// publisher that fails a fifth of its calls, one relay killed mid-run and
// its leases reaped.
func TestMySQLPartitionOrderSurvivesFailuresAndACrash(t *testing.T) {
	t.Parallel()
	tb := mysqltest.New(t)
	second, err := storage.Open(context.Background(), tb.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(second.Close)
	srv := natstest.Start(t)
	st := srv.Stream(t, jetstream.StreamConfig{Name: "ORDERED", Subjects: []string{"ordered.>"}, Duplicates: 10 * time.Minute})

	var all []mysqltest.Event
	for n := range 50 {
		for k := range 40 {
			key := fmt.Sprintf("key-%03d", k)
			payload, _ := json.Marshal(keyedEvent{Key: key, N: n})
			all = append(all, mysqltest.Event{Type: "ordered.event", PartitionKey: key, Payload: payload})
		}
	}
	for i := 0; i < len(all); i += 100 {
		tb.Insert(t, all[i:i+100]...)
	}
	n := len(all)

	rp, err := reaper.New(reaper.Config{Interval: 100 * time.Millisecond, LeaseTimeout: 2 * time.Second, BatchSize: 1000, MaxAttempts: 1000}, tb.Store)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	reaped := make(chan struct{})
	go func() { rp.Run(ctx); close(reaped) }()
	t.Cleanup(func() { cancel(); <-reaped })

	victim := &crashable{}
	for i := range 3 {
		var store storage.Queue = tb.Store
		if i == 2 {
			store = second
		}
		var pub publisher.Publisher = newFlaky(openNATS(t, srv, ""), uint64(i))
		if i == 0 {
			store = crashStore{Queue: store, c: victim}
			pub = crashPublisher{Publisher: pub, c: victim}
		}
		start(t, partitionConfig(fmt.Sprintf("relay-%d", i)), store, pub)
	}
	eventually.True(t, 30*time.Second, func() bool { return tb.Counts(t)[outbox.StatusDelivered] > n/5 },
		func() string { return "a fifth delivered" })
	victim.crashed.Store(true)

	waitCounts(t, tb, 2*time.Minute, map[outbox.Status]int{outbox.StatusDelivered: n})
	requireKeyOrder(t, st, n)
}

// TestMySQLDeleteModeLeavesNoRows: DELIVERED_RETENTION=0 on MariaDB; every
// event reaches the stream once and its row is gone.
func TestMySQLDeleteModeLeavesNoRows(t *testing.T) {
	t.Parallel()
	tb := mysqltest.New(t)
	srv := natstest.Start(t)
	st := srv.Stream(t, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})
	const n = 600
	tb.InsertN(t, n, "orders.created")
	start(t, relay.Config{BatchSize: 100, DeleteDelivered: true}, tb.Store, openNATS(t, srv, ""))
	waitCounts(t, tb, 30*time.Second, map[outbox.Status]int{})
	if got := natstest.Count(t, st); got != n {
		t.Errorf("stream holds %d messages, want %d", got, n)
	}
}
