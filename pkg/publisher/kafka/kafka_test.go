package kafka_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/kafkatest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/kafka"
	"github.com/outbox-relay/relay/pkg/publisher/publishertest"
)

// waitLong bounds every eventually-wait: kafka-go refreshes its cluster
// metadata every few seconds, and the machine is shared.
const waitLong = 45 * time.Second

func newTopic() string { return "t-" + uuid.NewString() }

// open connects the driver through publisher.Open, so the kafka://
// registration and URL parsing are part of every test.
func open(t *testing.T, rawURL string) publisher.Publisher {
	t.Helper()
	pub, err := publisher.Open(context.Background(), rawURL)
	if err != nil {
		t.Fatalf("publisher.Open(%s): %v", rawURL, err)
	}
	t.Cleanup(func() {
		// Writes that will never be answered must not hold the test up.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = pub.Close(ctx)
	})
	return pub
}

func event(typ, key, payload, headers string) outbox.Event {
	return outbox.Event{ID: uuid.New(), Type: typ, PartitionKey: key, Payload: []byte(payload), Headers: []byte(headers)}
}

func TestPublishRecordLayout(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t, kfake.NumBrokers(1))
	topic := newTopic()
	c.CreateTopic(t, topic, 3, nil)

	t.Run("topic_prefix", func(t *testing.T) {
		t.Parallel()
		pub := open(t, c.URL("?topic_prefix=t-"))
		typ := strings.TrimPrefix(topic, "t-")
		withKey := event(typ, "customer-7", "", `{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",`+
			`"b":"plain","a":42,"yes":true,"nothing":null,"x-event-id":"forged"}`)
		withKey.Payload = []byte{0x00, 0xff, '\n'} // binary payloads go through untouched
		noKey := event(typ, "", "second", "")
		empty := event(typ, "k", "", "null")
		empty.Payload = nil
		publishertest.RequireDelivered(t, publishertest.Publish(t, pub, withKey, noKey, empty))

		byID := map[string]*kgo.Record{}
		for _, r := range c.Records(t, topic, 3) {
			byID[kafkatest.Header(r, outbox.HeaderEventID)] = r
		}
		r := byID[withKey.ID.String()]
		if r == nil || string(r.Key) != "customer-7" || string(r.Value) != string(withKey.Payload) {
			t.Fatalf("keyed event arrived as %+v", r)
		}
		// Row headers sorted, the forged X-Event-ID dropped, null left
		// out, then the driver's headers.
		var got []string
		for _, h := range r.Headers {
			got = append(got, h.Key+"="+string(h.Value))
		}
		want := []string{"a=42", "b=plain", "traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "yes=true",
			"X-Event-ID=" + withKey.ID.String(), "X-Event-Type=" + typ, "X-Partition-Key=customer-7"}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("headers\n got %q\nwant %q", got, want)
		}

		r = byID[noKey.ID.String()]
		if r == nil || r.Key != nil || string(r.Value) != "second" {
			t.Fatalf("event without key arrived as %+v, want a null key", r)
		}
		if _, has := kafkatest.Headers(r)[outbox.HeaderPartitionKey]; has || len(r.Headers) != 2 {
			t.Errorf("event without key has headers %v, want only X-Event-ID and X-Event-Type", r.Headers)
		}

		r = byID[empty.ID.String()]
		if r == nil || r.Value == nil || len(r.Value) != 0 {
			t.Errorf("empty payload arrived as %+v, want an empty value, not a null one (a tombstone)", r)
		}
	})

	t.Run("topic", func(t *testing.T) {
		t.Parallel()
		fixed := newTopic()
		c.CreateTopic(t, fixed, 1, nil)
		pub := open(t, c.URL("?topic="+fixed))
		batch := []outbox.Event{event("orders.created", "k", "1", ""), event("orders.paid", "k", "2", "")}
		publishertest.RequireDelivered(t, publishertest.Publish(t, pub, batch...))
		recs := c.Records(t, fixed, 2)
		for i, r := range recs {
			if got := kafkatest.Header(r, outbox.HeaderEventType); got != batch[i].Type {
				t.Errorf("record %d: %s = %q, want %q", i, outbox.HeaderEventType, got, batch[i].Type)
			}
		}
	})
}

func TestKeysPickPartitionsLikeTheJavaClient(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t, kfake.NumBrokers(1))
	topic := newTopic()
	const partitions = 7
	c.CreateTopic(t, topic, partitions, nil)
	pub := open(t, c.URL(""))

	var batch []outbox.Event
	for i := range 300 {
		batch = append(batch, event(topic, fmt.Sprintf("key-%d", i%40), strconv.Itoa(i), ""))
	}
	publishertest.RequireDelivered(t, publishertest.Publish(t, pub, batch[:150]...))
	publishertest.RequireDelivered(t, publishertest.Publish(t, pub, batch[150:]...))

	// franz-go's sticky key partitioner is the Java client's default:
	// murmur2 of the key, modulo the partition count.
	java := kgo.StickyKeyPartitioner(nil).ForTopic(topic)
	partitionOf := map[string]int32{}
	order := map[string][]string{}
	for _, r := range c.Records(t, topic, len(batch)) {
		if want := java.Partition(r, partitions); int(r.Partition) != want {
			t.Fatalf("key %q went to partition %d; a Java producer would pick %d", r.Key, r.Partition, want)
		}
		if p, ok := partitionOf[string(r.Key)]; ok && p != r.Partition {
			t.Fatalf("key %q is in partitions %d and %d", r.Key, p, r.Partition)
		}
		partitionOf[string(r.Key)] = r.Partition
		order[string(r.Key)] = append(order[string(r.Key)], string(r.Value))
	}
	used := map[int32]bool{}
	for _, p := range partitionOf {
		used[p] = true
	}
	if len(used) < 2 {
		t.Errorf("40 keys all landed in one partition: the keys are not hashed")
	}
	for key, got := range order {
		var want []string
		for _, e := range batch {
			if e.PartitionKey == key {
				want = append(want, string(e.Payload))
			}
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("key %s: partition order %v, want batch order %v", key, got, want)
		}
	}
}

func TestPublishPermanentErrors(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t, kfake.NumBrokers(1), kfake.BrokerConfigs(map[string]string{"message.max.bytes": "65536"}))
	good := newTopic()
	c.CreateTopic(t, good, 1, nil)
	small := newTopic()
	c.CreateTopic(t, small, 1, map[string]string{"max.message.bytes": "2048"})
	longPrefix := strings.Repeat("p", 200)
	c.CreateTopic(t, longPrefix+"ok", 1, nil)

	cases := []struct {
		name  string
		query string
		bad   outbox.Event
		want  string
		// goodType is the event type of the good events around the bad
		// one; good by default.
		goodType string
	}{
		{"no such topic", "", event("nowhere-"+uuid.NewString(), "k", "{}", ""), "does not exist and the cluster does not create topics", ""},
		{"empty event type", "", event("", "k", "{}", ""), `invalid topic ""`, ""},
		{"space in event type", "", event("orders created", "k", "{}", ""), `invalid topic "orders created"`, ""},
		{"slash in event type", "", event("orders/created", "k", "{}", ""), "character '/' is not allowed", ""},
		{"dot", "", event(".", "k", "{}", ""), `invalid topic "."`, ""},
		{"dot dot", "", event("..", "k", "{}", ""), `invalid topic ".."`, ""},
		{"250 characters", "", event(strings.Repeat("a", 250), "k", "{}", ""), "1 to 249 characters", ""},
		{"prefix makes it too long", "?topic_prefix=" + longPrefix, event(strings.Repeat("a", 50), "k", "{}", ""), "1 to 249 characters", "ok"},
		{"headers array", "", event(good, "k", "{}", "[1]"), "headers must be a JSON object, got an array", ""},
		{"headers invalid JSON", "", event(good, "k", "{}", `{"a":`), "headers are not valid JSON", ""},
		{"header value object", "", event(good, "k", "{}", `{"meta":{"a":1}}`), `header "meta"`, ""},
		{"above batch_bytes", "?batch_bytes=1000", event(good, "k", strings.Repeat("x", 1000), ""), "above batch_bytes=1000", ""},
		{"above the broker's message.max.bytes", "", event(good, "k", strings.Repeat("x", 100_000), ""), "message too large for the broker", ""},
		{"above the topic's max.message.bytes", "", event(small, "k", strings.Repeat("x", 4000), ""), "message too large for the broker", small},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			goodType := tc.goodType
			if goodType == "" {
				goodType = good
			}
			pub := open(t, c.URL(tc.query))
			before := event(goodType, "k", "before", "")
			after := event(goodType, "k", "after", "")
			errs := publishertest.Publish(t, pub, before, tc.bad, after)
			if errs[0] != nil || errs[2] != nil {
				t.Fatalf("good events around the bad one failed: %v, %v", errs[0], errs[2])
			}
			switch err := errs[1]; {
			case err == nil:
				t.Fatal("bad event accepted")
			case !publisher.IsPermanent(err) || publisher.IsUnavailable(err):
				t.Fatalf("error %q: permanent %v, unavailable %v; want permanent only", err, publisher.IsPermanent(err), publisher.IsUnavailable(err))
			case !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

func TestParseURL(t *testing.T) {
	t.Parallel()
	parse := func(t *testing.T, raw string) (kafka.Config, error) {
		t.Helper()
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatalf("url.Parse(%q): %v", raw, err)
		}
		return kafka.ParseURL(u)
	}

	t.Run("defaults", func(t *testing.T) {
		t.Parallel()
		cfg, err := parse(t, "kafka://b1")
		if err != nil {
			t.Fatal(err)
		}
		want := kafka.Config{Brokers: []string{"b1:9092"}, Acks: "all", Compression: "none", BatchBytes: 1 << 20, Timeout: 10 * time.Second}
		if fmt.Sprintf("%+v", cfg) != fmt.Sprintf("%+v", want) {
			t.Errorf("got  %+v\nwant %+v", cfg, want)
		}
	})

	t.Run("every option", func(t *testing.T) {
		t.Parallel()
		cfg, err := parse(t, "kafka://relay:s3cr3t@b2,b1:9093/?topic_prefix=app.&acks=one&compression=zstd"+
			"&batch_bytes=500000&timeout=3s&tls_ca=/ca.pem&tls_cert=/c.pem&tls_key=/k.pem&tls_insecure=true&sasl=scram-sha-512")
		if err != nil {
			t.Fatal(err)
		}
		want := kafka.Config{
			Brokers: []string{"b2:9092", "b1:9093"}, TopicPrefix: "app.", Acks: "one", Compression: "zstd",
			BatchBytes: 500000, Timeout: 3 * time.Second, TLS: true, TLSCA: "/ca.pem", TLSCert: "/c.pem", TLSKey: "/k.pem",
			TLSInsecure: true, SASL: "scram-sha-512", User: "relay", Password: "s3cr3t",
		}
		if fmt.Sprintf("%+v", cfg) != fmt.Sprintf("%+v", want) {
			t.Errorf("got  %+v\nwant %+v", cfg, want)
		}
	})

	t.Run("IPv6 broker", func(t *testing.T) {
		t.Parallel()
		cfg, err := parse(t, "kafka://[::1]")
		if err != nil || len(cfg.Brokers) != 1 || cfg.Brokers[0] != "[::1]:9092" {
			t.Errorf("brokers %q, error %v; want [::1]:9092", cfg.Brokers, err)
		}
	})

	t.Run("values", func(t *testing.T) {
		t.Parallel()
		for _, raw := range []string{
			"kafka://b?topic=orders", "kafka://b?tls=true", "kafka://b?tls=false", "kafka://u:p@b?sasl=plain",
			"kafka://u:p@b?sasl=scram-sha-256", "kafka://b?acks=none", "kafka://b?acks=all",
			"kafka://b?compression=gzip", "kafka://b?compression=snappy", "kafka://b?compression=lz4", "kafka://b?compression=none",
		} {
			if _, err := parse(t, raw); err != nil {
				t.Errorf("ParseURL(%q): %v", raw, err)
			}
		}
	})

	const secret = "s3cr3t-pw"
	bad := []struct{ name, url, want string }{
		{"unknown option", "kafka://relay:" + secret + "@b:9092?sasl=plain&topic_prefx=x", `unknown option "topic_prefx" (known: topic_prefix, topic, acks, compression, batch_bytes, timeout, tls, tls_ca, tls_cert, tls_key, tls_insecure, sasl, format, ce_source); did you mean topic_prefix?`},
		{"no broker", "kafka://relay:" + secret + "@/?sasl=plain", "has no broker"},
		{"unknown format", "kafka://b?format=avro", `format="avro" is not one of relay (the default: X-Event-* headers), cloudevents (CloudEvents 1.0, binary content mode)`},
		{"source without cloudevents", "kafka://b?ce_source=/x", "ce_source= sets the CloudEvents source: it needs format=cloudevents"},
		{"path", "kafka://b:9092/orders", "has a path"},
		{"bad port", "kafka://b:99999", `broker "b:99999" has an invalid port`},
		{"empty broker", "kafka://b1:9092,,b2:9092", `broker "" is not host:port`},
		{"topic and prefix", "kafka://b?topic=a&topic_prefix=b", "exclude each other"},
		{"invalid topic", "kafka://b?topic=a/b", `invalid topic "a/b"`},
		{"invalid prefix", "kafka://b?topic_prefix=a%20b", `topic_prefix: invalid topic "a b"`},
		{"acks", "kafka://b?acks=2", `acks="2" is not one of all, one, none`},
		{"compression", "kafka://b?compression=brotli", `compression="brotli"`},
		{"batch_bytes zero", "kafka://b?batch_bytes=0", `batch_bytes="0"`},
		{"batch_bytes word", "kafka://b?batch_bytes=1MB", `batch_bytes="1MB"`},
		{"timeout without unit", "kafka://relay:" + secret + "@b?sasl=plain&timeout=10", `timeout="10"`},
		{"timeout negative", "kafka://b?timeout=-1s", `timeout="-1s"`},
		{"tls not a bool", "kafka://b?tls=yes please", `tls="yes please"`},
		{"tls_insecure not a bool", "kafka://b?tls_insecure=maybe", `tls_insecure="maybe"`},
		{"tls=false with a CA", "kafka://b?tls=false&tls_ca=/ca.pem", "tls=false contradicts"},
		{"tls_cert without tls_key", "kafka://b?tls_cert=/c.pem", "tls_cert and tls_key go together"},
		{"sasl without user", "kafka://b?sasl=plain", "sasl=plain needs user:password@"},
		{"user without sasl", "kafka://relay:" + secret + "@b", "no sasl= mechanism"},
		{"unknown sasl", "kafka://relay:" + secret + "@b?sasl=gssapi", `sasl="gssapi" is not one of plain, scram-sha-256, scram-sha-512`},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := parse(t, tc.url)
			publishertest.RequireRefused(t, tc.url, err, tc.want, secret)
		})
	}

	t.Run("scheme registered", func(t *testing.T) {
		t.Parallel()
		if err := publisher.Check("kafka://b1:9092,b2:9092"); err != nil {
			t.Error(err)
		}
	})
}

// deadAddr is a loopback address where nothing listens: a privileged port,
// which unlike a freed ephemeral one no parallel test can take.
func deadAddr(*testing.T) string { return "127.0.0.1:1" }

// silentAddr accepts connections and never answers, like a broker that
// hangs or a firewall that swallows packets.
func silentAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return l.Addr().String()
}

func TestOpenSucceedsWithBrokersDownAndFailsOnlyOnConfiguration(t *testing.T) {
	t.Parallel()
	dead := deadAddr(t)
	pub := open(t, "kafka://"+dead+"?timeout=2s")
	if err := pub.Ping(context.Background()); err == nil || !strings.Contains(err.Error(), dead) {
		t.Errorf("Ping with no broker up: %v, want an error naming %s", err, dead)
	}
	began := time.Now()
	for i, err := range publishertest.Publish(t, pub, event("orders", "k", "x", "")) {
		if !publisher.IsUnavailable(err) || publisher.IsPermanent(err) {
			t.Errorf("event %d with no broker up: %v, want unavailable", i, err)
		}
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("Publish with no broker up took %s", took)
	}

	missing := filepath.Join(t.TempDir(), "missing.pem")
	for _, q := range []string{"?tls_ca=" + missing, "?tls_cert=" + missing + "&tls_key=" + missing} {
		if _, err := publisher.Open(context.Background(), "kafka://"+dead+q); err == nil || !strings.Contains(err.Error(), "missing.pem") {
			t.Errorf("Open with %s: %v, want an error naming the file", q, err)
		}
	}
}

func TestStartsPausedThenPublishesWhenTheClusterComesUp(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t, kfake.NumBrokers(1))
	topic := newTopic()
	c.CreateTopic(t, topic, 1, nil)
	c.Stop()

	pub := open(t, c.URL("?timeout=2s"))
	if err := pub.Ping(context.Background()); err == nil {
		t.Fatal("Ping succeeded with the cluster down")
	}
	for _, err := range publishertest.Publish(t, pub, event(topic, "k", "early", "")) {
		if !publisher.IsUnavailable(err) {
			t.Fatalf("publish with the cluster down: %v, want unavailable", err)
		}
	}

	c.Start(t)
	var last error
	eventually.True(t, waitLong, func() bool {
		last = publishertest.Publish(t, pub, event(topic, "k", "late", ""))[0]
		return last == nil
	}, func() string { return fmt.Sprintf("a publish to succeed, last error %v", last) })
	if got := c.Records(t, topic, 1); string(got[0].Value) != "late" {
		t.Errorf("topic holds %q, want only the late event", got[0].Value)
	}
}

func TestPingAsksEachBrokerOnItsOwn(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t, kfake.NumBrokers(1))
	dead, silent := deadAddr(t), silentAddr(t)
	const timeout = 8 * time.Second

	// A broker that refuses and one that never answers are listed first:
	// dialling the comma-joined list, or trying brokers one after another,
	// would fail or take the whole timeout.
	pub := open(t, "kafka://"+silent+","+dead+","+c.Addrs()[0]+"?timeout="+timeout.String())
	began := time.Now()
	if err := pub.Ping(context.Background()); err != nil {
		t.Fatalf("Ping with one live broker among three: %v", err)
	}
	if took := time.Since(began); took > timeout/2 {
		t.Errorf("Ping took %s; a live broker answers at once", took)
	}

	// A loaded or distant broker answers slowly and is still up.
	const latency = 500 * time.Millisecond
	kc := c.Fake()
	kc.ControlKey(int16(kmsg.Metadata), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		kc.SleepControl(func() { <-time.After(latency) })
		return nil, nil, false // then answer as usual
	})
	pub = open(t, c.URL(""))
	if err := pub.Ping(context.Background()); err != nil {
		t.Errorf("Ping to a broker answering in %s: %v", latency, err)
	}

	// Only dead ones: the error names each, within the timeout.
	pub = open(t, "kafka://"+silent+","+dead+"?timeout=1s")
	began = time.Now()
	err := pub.Ping(context.Background())
	if err == nil || !strings.Contains(err.Error(), silent) || !strings.Contains(err.Error(), dead) {
		t.Errorf("Ping with no live broker: %v, want an error naming %s and %s", err, silent, dead)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("Ping took %s with timeout=1s", took)
	}
}

func TestPublishesThroughTheLiveBrokerOfAList(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t, kfake.NumBrokers(1))
	topic := newTopic()
	c.CreateTopic(t, topic, 1, nil)
	pub := open(t, "kafka://"+deadAddr(t)+","+c.Addrs()[0]+"?timeout=3s")
	var last error
	eventually.True(t, waitLong, func() bool {
		last = publishertest.Publish(t, pub, event(topic, "k", "x", ""))[0]
		return last == nil
	}, func() string { return fmt.Sprintf("a publish through the second broker, last error %v", last) })
}

// TestRecordSizeMatchesKafkaGo keeps the driver's size check in step with
// the one kafka-go makes before sending: a record kafka-go refuses would fail
// its whole WriteMessages call. Both checks run before any network I/O, so a
// cancelled context and no broker are enough.
func TestRecordSizeMatchesKafkaGo(t *testing.T) {
	t.Parallel()
	const limit = 5000
	addr := deadAddr(t)
	pub := open(t, "kafka://"+addr+"?batch_bytes="+strconv.Itoa(limit))
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()

	// The largest payload the driver lets through with this key and these
	// headers.
	e := event("orders", "some-key", "", `{"tenant":"acme","n":1}`)
	largest := 0
	for n := 4700; n < limit; n++ {
		e.Payload = []byte(strings.Repeat("x", n))
		err := pub.Publish(cancelled, []outbox.Event{e})[0]
		if publisher.IsPermanent(err) {
			if !strings.Contains(err.Error(), "above batch_bytes") {
				t.Fatalf("payload of %d bytes: %v", n, err)
			}
			break
		}
		largest = n
	}
	if largest == 0 || largest == limit-1 {
		t.Fatalf("largest accepted payload %d: the search did not find the limit", largest)
	}

	m := kafkago.Message{Topic: "orders", Key: []byte(e.PartitionKey), Value: []byte(strings.Repeat("x", largest)), Headers: []kafkago.Header{
		{Key: "n", Value: []byte("1")}, {Key: "tenant", Value: []byte("acme")},
		{Key: outbox.HeaderEventID, Value: []byte(e.ID.String())}, {Key: outbox.HeaderEventType, Value: []byte(e.Type)},
		{Key: outbox.HeaderPartitionKey, Value: []byte(e.PartitionKey)},
	}}
	w := &kafkago.Writer{Addr: kafkago.TCP(addr), BatchBytes: limit}
	defer func() { _ = w.Close() }()
	var tooLarge kafkago.MessageTooLargeError
	if err := w.WriteMessages(cancelled, m); errors.As(err, &tooLarge) {
		t.Fatalf("kafka-go refuses the largest record the driver lets through (%d-byte payload)", largest)
	}
	m.Value = append(m.Value, 'x')
	if err := w.WriteMessages(cancelled, m); !errors.As(err, &tooLarge) {
		t.Fatalf("kafka-go takes a record the driver refuses (%d-byte payload): %v", largest+1, err)
	}
}

func TestUnknownTopic(t *testing.T) {
	t.Parallel()

	t.Run("created by a cluster that creates topics on demand", func(t *testing.T) {
		t.Parallel()
		c := kafkatest.Start(t, kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(2))
		pub := open(t, c.URL(""))
		topic := newTopic()
		publishertest.RequireDelivered(t, publishertest.Publish(t, pub, event(topic, "k", "x", "")))
		c.Records(t, topic, 1)
	})

	t.Run("found once created", func(t *testing.T) {
		t.Parallel()
		c := kafkatest.Start(t, kfake.NumBrokers(1))
		pub := open(t, c.URL(""))
		topic := newTopic()
		if err := publishertest.Publish(t, pub, event(topic, "k", "x", ""))[0]; !publisher.IsPermanent(err) {
			t.Fatalf("before the topic exists: %v, want permanent", err)
		}
		// The driver's cached metadata must not keep calling it missing.
		c.CreateTopic(t, topic, 1, nil)
		publishertest.RequireDelivered(t, publishertest.Publish(t, pub, event(topic, "k", "y", "")))
	})

	t.Run("not permanent while no broker can tell", func(t *testing.T) {
		t.Parallel()
		c := kafkatest.Start(t, kfake.NumBrokers(1))
		known := newTopic()
		c.CreateTopic(t, known, 1, nil)
		pub := open(t, c.URL("?timeout=2s"))
		publishertest.RequireDelivered(t, publishertest.Publish(t, pub, event(known, "k", "x", "")))
		c.Stop()
		for i, err := range publishertest.Publish(t, pub, event(newTopic(), "k", "x", ""), event(known, "k", "y", "")) {
			if !publisher.IsUnavailable(err) || publisher.IsPermanent(err) {
				t.Errorf("event %d with the cluster down: %v, want unavailable", i, err)
			}
		}
	})
}

// produceAnswers makes the cluster answer every produce request with code
// for each partition, as a broker in trouble would.
func produceAnswers(c *kafkatest.Cluster, code int16) {
	kc := c.Fake()
	kc.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		pr := req.(*kmsg.ProduceRequest)
		resp := pr.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range pr.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
}

func TestBrokerErrorCodesAreClassified(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err                    *kerr.Error
		unavailable, permanent bool
	}{
		{kerr.NotLeaderForPartition, true, false},
		{kerr.LeaderNotAvailable, true, false},
		{kerr.RequestTimedOut, true, false},
		{kerr.NotEnoughReplicas, true, false},
		{kerr.MessageTooLarge, false, true},
		{kerr.InvalidTopicException, false, true},
		{kerr.InvalidRecord, false, false},
		{kerr.TopicAuthorizationFailed, false, false},
		{kerr.UnknownServerError, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.err.Message, func(t *testing.T) {
			t.Parallel()
			c := kafkatest.Start(t, kfake.NumBrokers(1))
			topic := newTopic()
			c.CreateTopic(t, topic, 1, nil)
			produceAnswers(c, tc.err.Code)
			pub := open(t, c.URL(""))
			err := publishertest.Publish(t, pub, event(topic, "k", "x", ""))[0]
			if err == nil || publisher.IsUnavailable(err) != tc.unavailable || publisher.IsPermanent(err) != tc.permanent {
				t.Fatalf("%s: got %v (unavailable %v, permanent %v), want unavailable %v, permanent %v",
					tc.err.Message, err, publisher.IsUnavailable(err), publisher.IsPermanent(err), tc.unavailable, tc.permanent)
			}
		})
	}

	t.Run("unknown topic for a topic that exists", func(t *testing.T) {
		t.Parallel()
		// A broker whose metadata lags says unknown for a topic that
		// exists: asking again shows it is there, so retry.
		c := kafkatest.Start(t, kfake.NumBrokers(1))
		topic := newTopic()
		c.CreateTopic(t, topic, 1, nil)
		produceAnswers(c, kerr.UnknownTopicOrPartition.Code)
		err := publishertest.Publish(t, open(t, c.URL("")), event(topic, "k", "x", ""))[0]
		if err == nil || publisher.IsPermanent(err) || publisher.IsUnavailable(err) || !strings.Contains(err.Error(), "exists, yet a broker called it unknown") {
			t.Fatalf("got %v, want a retryable error saying the topic exists", err)
		}
	})
}

func TestContextCancelledWhileAwaitingTheBrokerIsUnavailable(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t, kfake.NumBrokers(1))
	topic := newTopic()
	c.CreateTopic(t, topic, 1, nil)
	pub := open(t, c.URL("?timeout=30s"))
	publishertest.RequireDelivered(t, publishertest.Publish(t, pub, event(topic, "k", "warm-up", "")))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The broker swallows the produce request and cancels the context, so
	// the driver is certainly waiting for the answer when it ends.
	kc := c.Fake()
	kc.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		cancel()
		return nil, nil, true
	})
	began := time.Now()
	errs := pub.Publish(ctx, []outbox.Event{event(topic, "k", "1", ""), event(topic, "k", "2", "")})
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("Publish returned %s after the context ended", took)
	}
	for i, err := range errs {
		if !publisher.IsUnavailable(err) || !errors.Is(err, context.Canceled) {
			t.Errorf("event %d: %v, want unavailable wrapping context.Canceled", i, err)
		}
	}
}

func TestOptionsReachTheBroker(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t, kfake.NumBrokers(1))
	for _, q := range []string{
		"compression=gzip", "compression=snappy", "compression=lz4", "compression=zstd", "compression=none",
		"acks=one", "acks=none", "acks=all&timeout=5s&batch_bytes=100000",
	} {
		t.Run(q, func(t *testing.T) {
			t.Parallel()
			topic := newTopic()
			c.CreateTopic(t, topic, 1, nil)
			pub := open(t, c.URL("?"+q))
			var batch []outbox.Event
			for i := range 50 {
				batch = append(batch, event(topic, "k", strings.Repeat(strconv.Itoa(i), 100), ""))
			}
			publishertest.RequireDelivered(t, publishertest.Publish(t, pub, batch...))
			for i, r := range c.Records(t, topic, len(batch)) {
				if string(r.Value) != string(batch[i].Payload) {
					t.Fatalf("record %d = %q, want %q", i, r.Value, batch[i].Payload)
				}
			}
		})
	}
}

func TestSASL(t *testing.T) {
	t.Parallel()
	const user, password, wrong = "relay", "s3cr3t-Pa55", "wr0ng-Pa55"
	for _, mech := range []struct{ option, kfake string }{
		{"plain", "PLAIN"}, {"scram-sha-256", "SCRAM-SHA-256"}, {"scram-sha-512", "SCRAM-SHA-512"},
	} {
		t.Run(mech.option, func(t *testing.T) {
			t.Parallel()
			c := kafkatest.Start(t, kfake.NumBrokers(1), kfake.EnableSASL(), kfake.Superuser(mech.kfake, user, password))
			topic := newTopic()
			// The test's own client is the superuser too.
			cl := c.Client(t, kgo.SASL(saslFor(t, mech.kfake, user, password)))
			kafkatest.CreateTopic(t, cl, topic, 1, nil)

			url := func(pw string) string {
				return "kafka://" + user + ":" + pw + "@" + strings.Join(c.Addrs(), ",") + "?sasl=" + mech.option + "&timeout=3s"
			}
			good := open(t, url(password))
			if err := good.Ping(context.Background()); err != nil {
				t.Fatalf("Ping with the right password: %v", err)
			}
			publishertest.RequireDelivered(t, publishertest.Publish(t, good, event(topic, "k", "x", "")))

			bad := open(t, url(wrong))
			pingErr := bad.Ping(context.Background())
			if pingErr == nil {
				t.Fatal("Ping with the wrong password succeeded")
			}
			pubErr := publishertest.Publish(t, bad, event(topic, "k", "y", ""))[0]
			if !publisher.IsUnavailable(pubErr) {
				t.Errorf("publish with the wrong password: %v, want unavailable (the events are not to blame)", pubErr)
			}
			for _, err := range []error{pingErr, pubErr} {
				if strings.Contains(err.Error(), wrong) || strings.Contains(err.Error(), password) {
					t.Errorf("error %q reveals a password", err)
				}
			}
		})
	}
}

func TestTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, caKey := newCert(t, nil, nil, "test CA", dir, "ca")
	_, _ = newCert(t, ca, caKey, "127.0.0.1", dir, "server")
	_, _ = newCert(t, ca, caKey, "relay", dir, "client")
	serverCert, err := tls.LoadX509KeyPair(filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	// Mutual TLS: the broker wants a client certificate signed by the CA.
	c := kafkatest.Start(t, kfake.NumBrokers(1), kfake.TLS(&tls.Config{
		Certificates: []tls.Certificate{serverCert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12,
	}))
	topic := newTopic()
	kafkatest.CreateTopic(t, c.Client(t, kgo.DialTLSConfig(&tls.Config{
		RootCAs: pool, Certificates: []tls.Certificate{loadPair(t, dir, "client")}, MinVersion: tls.VersionTLS12,
	})), topic, 1, nil)

	file := func(name string) string { return filepath.Join(dir, name) }
	client := "&tls_cert=" + file("client.pem") + "&tls_key=" + file("client-key.pem")
	for _, tc := range []struct {
		name, query string
		works       bool
	}{
		{"CA and client certificate", "?tls=true&tls_ca=" + file("ca.pem") + client, true},
		{"insecure with client certificate", "?tls_insecure=true" + client, true},
		{"no client certificate", "?tls_ca=" + file("ca.pem"), false},
		{"system roots only", "?tls=true" + client, false},
		{"no TLS", "?tls=false", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pub := open(t, c.URL(tc.query+"&timeout=3s"))
			err := pub.Ping(context.Background())
			if tc.works != (err == nil) {
				t.Fatalf("Ping: %v, want success %v", err, tc.works)
			}
			errs := publishertest.Publish(t, pub, event(topic, "k", tc.name, ""))
			if tc.works {
				publishertest.RequireDelivered(t, errs)
			} else if !publisher.IsUnavailable(errs[0]) {
				t.Errorf("publish without a working TLS setup: %v, want unavailable (the events are not to blame)", errs[0])
			}
		})
	}
}

// newCert writes name.pem and name-key.pem to dir: a CA when parent is nil,
// else a certificate for host signed by parent.
func newCert(t *testing.T, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, host, dir, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	}
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(file, typ string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, file), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(name+".pem", "CERTIFICATE", der)
	write(name+"-key.pem", "EC PRIVATE KEY", keyDER)
	return cert, key
}

func loadPair(t *testing.T, dir, name string) tls.Certificate {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

func saslFor(t *testing.T, mechanism, user, password string) sasl.Mechanism {
	t.Helper()
	switch mechanism {
	case "PLAIN":
		return plain.Auth{User: user, Pass: password}.AsMechanism()
	case "SCRAM-SHA-256":
		return scram.Auth{User: user, Pass: password}.AsSha256Mechanism()
	case "SCRAM-SHA-512":
		return scram.Auth{User: user, Pass: password}.AsSha512Mechanism()
	}
	t.Fatalf("no mechanism %s", mechanism)
	return nil
}
