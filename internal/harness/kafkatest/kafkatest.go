// Package kafkatest runs an in-process Kafka cluster (franz-go's kfake) for
// tests. The cluster keeps its data in a directory of the test's, so a test
// can stop it (every connection cut, the ports refusing) and start it again
// on the same ports with the same topics and records. Topics are created and
// records read back with a franz-go client of the test's own, never with the
// client under test.
package kafkatest

import (
	"context"
	"errors"
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
)

// readTimeout bounds Records: a writer under test may wait for a metadata
// refresh or two, seconds each, before it delivers, and the machine is
// shared.
const readTimeout = time.Minute

// Cluster is an in-process kfake cluster that survives Stop and Start.
type Cluster struct {
	opts  []kfake.Opt
	dir   string
	ports []int

	mu sync.Mutex
	kc *kfake.Cluster
}

// Start runs a cluster with opts (kfake.NumBrokers, kfake.BrokerConfigs,
// kfake.TLS …) until the test ends.
func Start(t testing.TB, opts ...kfake.Opt) *Cluster {
	t.Helper()
	c := &Cluster{opts: opts, dir: t.TempDir()}
	c.Start(t)
	t.Cleanup(c.Stop)
	return c
}

// Start runs the cluster again after Stop, on the ports it had and with the
// data it held. It does nothing while the cluster runs.
func (c *Cluster) Start(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.kc != nil {
		return
	}
	opts := append(slices.Clone(c.opts), kfake.DataDir(c.dir))
	if c.ports != nil {
		opts = append(opts, kfake.Ports(c.ports...))
	}
	kc, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("kafkatest: start cluster: %v", err)
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

// Stop shuts every broker down; the data stays for Start.
func (c *Cluster) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.kc != nil {
		c.kc.Close()
		c.kc = nil
	}
}

// Fake is the running kfake cluster, for tests that script its answers
// (ControlKey); nil while stopped. A control function must use the value it
// was given here, not call Fake: Stop holds the lock while the cluster
// finishes its control functions.
func (c *Cluster) Fake() *kfake.Cluster {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.kc
}

// Addrs lists every broker's host:port, stopped or not.
func (c *Cluster) Addrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, len(c.ports))
	for i, p := range c.ports {
		out[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	}
	return out
}

// URL is a kafka:// URL listing every broker, followed by query ("" or
// "?option=value…").
func (c *Cluster) URL(query string) string {
	return "kafka://" + strings.Join(c.Addrs(), ",") + query
}

// Client is a franz-go client seeded with every broker, with opts added,
// closed at the end of the test.
func (c *Cluster) Client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.Addrs()...)}, opts...)...)
	if err != nil {
		t.Fatalf("kafkatest: client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// CreateTopic creates a topic with topic-level configs (nil for none),
// failing the test if it cannot, or if the topic exists already.
func (c *Cluster) CreateTopic(t testing.TB, name string, partitions int32, configs map[string]string) {
	t.Helper()
	CreateTopic(t, c.Client(t), name, partitions, configs)
}

// CreateTopic is Cluster.CreateTopic through cl, for a cluster that wants
// its clients to authenticate (kfake.EnableSASL, a kfake.TLS that asks for
// client certificates).
func CreateTopic(t testing.TB, cl *kgo.Client, name string, partitions int32, configs map[string]string) {
	t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, partitions, -1
	for k, v := range configs {
		cfg := kmsg.NewCreateTopicsRequestTopicConfig()
		cfg.Name, cfg.Value = k, kmsg.StringPtr(v)
		rt.Configs = append(rt.Configs, cfg)
	}
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	}
	if err != nil {
		t.Fatalf("kafkatest: create topic %s: %v", name, err)
	}
}

// Records reads topic from the start until want records arrived, in
// partition order, through a fresh connection (it works after a restart).
// A topic that does not exist yet is waited for.
func (c *Cluster) Records(t testing.TB, topic string, want int) []*kgo.Record {
	t.Helper()
	cl := c.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	var got []*kgo.Record
	for len(got) < want {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("kafkatest: topic %s: %d records after %s, want %d", topic, len(got), readTimeout, want)
		}
		for _, fe := range fetches.Errors() {
			if !errors.Is(fe.Err, kerr.UnknownTopicOrPartition) {
				t.Fatalf("kafkatest: fetch %s: %v", topic, fe.Err)
			}
		}
		fetches.EachRecord(func(r *kgo.Record) { got = append(got, r) })
	}
	return got
}

// AllRecords reads every record topic holds, in partition order. Call it
// once nothing more is being written.
func (c *Cluster) AllRecords(t testing.TB, topic string) []*kgo.Record {
	t.Helper()
	return c.Records(t, topic, int(c.EndOffsets(t, topic)))
}

// EndOffsets is how many records topic holds: the sum of its partitions'
// end offsets, as nothing is ever deleted in these tests.
func (c *Cluster) EndOffsets(t testing.TB, topic string) int64 {
	t.Helper()
	cl := c.Client(t)
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
		t.Fatalf("kafkatest: metadata for %s: %v", topic, err)
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
		t.Fatalf("kafkatest: list offsets of %s: %v", topic, err)
	}
	var sum int64
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				t.Fatalf("kafkatest: list offsets of %s/%d: %v", topic, rp.Partition, err)
			}
			sum += rp.Offset
		}
	}
	return sum
}

// Header is the value of r's header key, "" when it has none.
func Header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// Headers is r's headers as a map.
func Headers(r *kgo.Record) map[string]string {
	h := map[string]string{}
	for _, x := range r.Headers {
		h[x.Key] = string(x.Value)
	}
	return h
}
