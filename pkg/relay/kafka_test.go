package relay_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	_ "github.com/outbox-relay/relay/pkg/publisher/kafka" // registers kafka://
	"github.com/outbox-relay/relay/pkg/relay"
	"github.com/outbox-relay/relay/pkg/storage/postgres/pgtest"
)

// kafkaCluster is an in-process kfake cluster that keeps its data on disk,
// so a test can stop it (connections cut, ports refusing) and start it again
// on the same ports with the same topics and records.
type kafkaCluster struct {
	dir   string
	opts  []kfake.Opt
	ports []int

	mu sync.Mutex
	kc *kfake.Cluster
}

func startKafka(t testing.TB, opts ...kfake.Opt) *kafkaCluster {
	t.Helper()
	c := &kafkaCluster{dir: t.TempDir(), opts: opts}
	c.start(t)
	t.Cleanup(c.stop)
	return c
}

func (c *kafkaCluster) start(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	opts := append(slices.Clone(c.opts), kfake.DataDir(c.dir))
	if c.ports != nil {
		opts = append(opts, kfake.Ports(c.ports...))
	}
	kc, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("kfake: start cluster: %v", err)
	}
	if c.ports == nil {
		for _, addr := range kc.ListenAddrs() {
			_, port, _ := net.SplitHostPort(addr)
			n, _ := strconv.Atoi(port)
			c.ports = append(c.ports, n)
		}
	}
	c.kc = kc
}

func (c *kafkaCluster) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.kc != nil {
		c.kc.Close()
		c.kc = nil
	}
}

func (c *kafkaCluster) addrs() []string {
	out := make([]string, len(c.ports))
	for i, p := range c.ports {
		out[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	}
	return out
}

func (c *kafkaCluster) client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.addrs()...)}, opts...)...)
	if err != nil {
		t.Fatalf("kgo client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func (c *kafkaCluster) createTopic(t testing.TB, name string, partitions int32) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, partitions, -1
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), c.client(t))
	if err == nil {
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		t.Fatalf("create topic %s: %v", name, err)
	}
}

// records reads every record in topic, in partition order. Call it once
// the relay settled: then nothing more is being written.
func (c *kafkaCluster) records(t testing.TB, topic string) []*kgo.Record {
	t.Helper()
	want := c.endOffsets(t, topic)
	cl := c.client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var got []*kgo.Record
	for int64(len(got)) < want {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("topic %s: %d records after a minute, want %d", topic, len(got), want)
		}
		if err := fetches.Err(); err != nil {
			t.Fatalf("fetch %s: %v", topic, err)
		}
		fetches.EachRecord(func(r *kgo.Record) { got = append(got, r) })
	}
	return got
}

// endOffsets is how many records topic holds: the sum of its partitions'
// end offsets, as nothing is ever deleted in these tests.
func (c *kafkaCluster) endOffsets(t testing.TB, topic string) int64 {
	t.Helper()
	cl := c.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	meta := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	meta.Topics = append(meta.Topics, mt)
	mresp, err := meta.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(mresp.Topics[0].ErrorCode)
	}
	if err != nil {
		t.Fatalf("metadata for %s: %v", topic, err)
	}
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for _, p := range mresp.Topics[0].Partitions {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = p.Partition, -1 // -1: the end
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("list offsets of %s: %v", topic, err)
	}
	var sum int64
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				t.Fatalf("list offsets of %s/%d: %v", topic, rp.Partition, err)
			}
			sum += rp.Offset
		}
	}
	return sum
}

func kafkaHeader(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func openKafka(t testing.TB, c *kafkaCluster, query string) publisher.Publisher {
	t.Helper()
	pub, err := publisher.Open(context.Background(), "kafka://"+strings.Join(c.addrs(), ",")+query)
	if err != nil {
		t.Fatalf("open kafka publisher: %v", err)
	}
	t.Cleanup(func() { _ = pub.Close(context.Background()) })
	return pub
}

func TestKafkaDeliversEveryEventOnceWithHeaders(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	c := startKafka(t)
	c.createTopic(t, "orders.created", 4)

	const n = 1200
	events := make([]pgtest.Event, n)
	for i := range events {
		events[i] = pgtest.Event{
			Type:         "created",
			PartitionKey: fmt.Sprintf("customer-%d", i%7),
			Payload:      pgtest.Payload(i, 200),
			Headers:      fmt.Sprintf(`{"tenant":"acme","seq":%d,"replayed":false}`, i),
		}
		if i%10 == 9 {
			events[i].PartitionKey = "" // NULL partition_key
		}
	}
	ids := tb.Insert(t, events...)

	start(t, relay.Config{BatchSize: 100}, tb.Store, openKafka(t, c, "?topic_prefix=orders."))
	waitCounts(t, tb, time.Minute, map[outbox.Status]int{outbox.StatusDelivered: n})

	byID := map[string]int{}
	for i, id := range ids {
		byID[id.String()] = i
	}
	recs := c.records(t, "orders.created")
	if len(recs) != n {
		t.Fatalf("topic holds %d records, want %d", len(recs), n)
	}
	seen := map[string]bool{}
	for _, r := range recs {
		id := kafkaHeader(r, outbox.HeaderEventID)
		i, ok := byID[id]
		if !ok || seen[id] {
			t.Fatalf("record with X-Event-ID %q: known %v, seen before %v", id, ok, seen[id])
		}
		seen[id] = true
		e := events[i]
		if string(r.Key) != e.PartitionKey || (e.PartitionKey == "" && r.Key != nil) {
			t.Fatalf("event %d key = %q, want %q", i, r.Key, e.PartitionKey)
		}
		if string(r.Value) != string(e.Payload) {
			t.Fatalf("event %d value = %q, want %q", i, r.Value, e.Payload)
		}
		want := map[string]string{
			outbox.HeaderEventType:    "created",
			outbox.HeaderPartitionKey: e.PartitionKey,
			"tenant":                  "acme",
			"seq":                     strconv.Itoa(i),
			"replayed":                "false",
		}
		for k, v := range want {
			if got := kafkaHeader(r, k); got != v {
				t.Fatalf("event %d header %s = %q, want %q", i, k, got, v)
			}
		}
	}
}

func TestKafkaKeepsPartitionKeyOrderWithinABatch(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	c := startKafka(t)
	c.createTopic(t, "ordered", 3)

	const n = 300
	events := make([]pgtest.Event, n)
	for i := range events {
		events[i] = pgtest.Event{Type: "ordered", PartitionKey: fmt.Sprintf("k%d", i%5), Payload: []byte(strconv.Itoa(i))}
	}
	// One transaction: only insertion order tells the rows apart.
	ids := tb.Insert(t, events...)

	start(t, relay.Config{BatchSize: n, MaxInFlightBatches: 1}, tb.Store, openKafka(t, c, ""))
	waitCounts(t, tb, time.Minute, map[outbox.Status]int{outbox.StatusDelivered: n})

	pos := map[string]int{}
	for i, id := range ids {
		pos[id.String()] = i
	}
	last := map[string]int{}
	for _, r := range c.records(t, "ordered") {
		i := pos[kafkaHeader(r, outbox.HeaderEventID)]
		if prev, ok := last[string(r.Key)]; ok && i < prev {
			t.Fatalf("key %s: event %d reached the topic after event %d", r.Key, i, prev)
		}
		last[string(r.Key)] = i
	}
}

func TestKafkaBrokerOutageSendsNothingDead(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	c := startKafka(t)
	c.createTopic(t, "outage.event", 3)
	const n = 20000
	ids := tb.InsertN(t, n, "outage.event")

	// Two attempts would kill any event the outage were counted against.
	r := start(t, relay.Config{BatchSize: 100, MaxInFlightBatches: 2, Retry: relay.RetryPolicy{MaxAttempts: 2}},
		tb.Store, openKafka(t, c, "?timeout=2s"))

	eventually.True(t, 30*time.Second, func() bool { return tb.Counts(t)[outbox.StatusDelivered] > 0 },
		func() string { return "first deliveries" })
	c.stop()
	eventually.True(t, 30*time.Second, func() bool { return r.engine.State() == relay.StatePaused },
		func() string { return fmt.Sprintf("engine paused, state %s", r.engine.State()) })
	if got := tb.Counts(t); got[outbox.StatusDelivered] == n {
		t.Fatal("the backlog drained before the outage; raise n")
	}
	c.start(t)

	waitCounts(t, tb, 2*time.Minute, map[outbox.Status]int{outbox.StatusDelivered: n})
	if r.engine.State() != relay.StateActive {
		t.Errorf("state after recovery = %s, want active", r.engine.State())
	}
	if burned := tb.Exec(t, "SELECT 1 FROM {{table}} WHERE attempts > 0"); burned != 0 {
		t.Errorf("%d events had an attempt counted for the outage", burned)
	}
	// kafka-go has no idempotent producer: a batch cut off by the outage
	// may have reached the topic before the relay released it, and is
	// then sent again. Every event must be there at least once.
	recs := c.records(t, "outage.event")
	copies := map[string]int{}
	for _, rec := range recs {
		copies[kafkaHeader(rec, outbox.HeaderEventID)]++
	}
	for _, id := range ids {
		if copies[id.String()] == 0 {
			t.Fatalf("event %s is DELIVERED but not in the topic", id)
		}
	}
	if len(copies) != n {
		t.Errorf("topic holds %d distinct events, want %d", len(copies), n)
	}
	t.Logf("%d records for %d events: %d duplicates from batches cut off by the outage", len(recs), n, len(recs)-n)
}
