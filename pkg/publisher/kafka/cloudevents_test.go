package kafka_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/relay/internal/harness/cetest"
	"github.com/outbox-relay/relay/internal/harness/kafkatest"
	"github.com/outbox-relay/relay/pkg/inbox/eventid"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/publishertest"
)

func TestCloudEventsDecodeWithTheSDK(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t, kfake.NumBrokers(1))
	topic := newTopic()
	c.CreateTopic(t, topic, 1, nil)
	ctx := publisher.WithTable(context.Background(), "outbox")
	pub, err := publisher.Open(ctx, c.URL("?format=cloudevents&topic="+topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close(context.Background()) })

	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	e := event("orders.created", "customer 7 α", `{"n":1}`,
		`{"Content-Type":"application/json","traceparent":"`+tp+`","ce_id":"forged","ce_subject":"order-9","x-tenant":"t1"}`)
	e.CreatedAt = time.Date(2026, 11, 23, 4, 5, 6, 123456000, time.UTC)
	plain := event("orders.created", "", "raw", "")
	plain.CreatedAt = time.Now()
	publishertest.RequireDelivered(t, publishertest.Publish(t, pub, e, plain))

	recs := c.Records(t, topic, 2)
	if id, err := eventid.CloudEventsKafka(recs[0].Headers); id != e.ID.String() {
		t.Errorf("eventid.CloudEventsKafka = %q, %v; want %s", id, err, e.ID)
	}
	h := kafkatest.Headers(recs[0])
	got, err := cetest.Headers(cetest.Kafka, h, recs[0].Value)
	if err != nil {
		t.Fatalf("the SDK cannot decode the record: %v (headers %v)", err, h)
	}
	cetest.Check(t, got, e, cetest.Want{Source: "/outbox", DataContentType: "application/json", Traceparent: tp})
	if got.Subject() != "order-9" {
		t.Errorf("subject %q: a row's ce_subject header should travel as the attribute", got.Subject())
	}
	if string(recs[0].Key) != e.PartitionKey {
		t.Errorf("record key %q, want the partition key", recs[0].Key)
	}
	for _, k := range []string{outbox.HeaderEventID, outbox.HeaderEventType, outbox.HeaderPartitionKey, "Content-Type"} {
		if v, ok := h[k]; ok {
			t.Errorf("header %s = %q sent with format=cloudevents", k, v)
		}
	}
	if h["x-tenant"] != "t1" || h["traceparent"] != tp || h["ce_partitionkey"] != e.PartitionKey {
		t.Errorf("headers %v: want the row's own, and the partition key as it is (Kafka headers are bytes)", h)
	}
	n := 0
	for _, x := range recs[0].Headers {
		if x.Key == "ce_id" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d ce_id headers, want the relay's alone", n)
	}

	h = kafkatest.Headers(recs[1])
	if got, err = cetest.Headers(cetest.Kafka, h, recs[1].Value); err != nil {
		t.Fatalf("the SDK cannot decode the record: %v", err)
	}
	cetest.Check(t, got, plain, cetest.Want{Source: "/outbox"})
}

func TestCloudEventsCountTowardTheRecordLimit(t *testing.T) {
	t.Parallel()
	// A record that fits batch_bytes as it is, but not with its attributes.
	e := event("t", "", strings.Repeat("x", 900), "")
	e.CreatedAt = time.Now()
	for _, tt := range []struct {
		format string
		fits   bool
	}{{"relay", true}, {"cloudevents", false}} {
		pub := open(t, "kafka://127.0.0.1:1/?topic=t&batch_bytes=1000&format="+tt.format)
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // nothing may reach a broker: only the size check answers
		err := pub.Publish(ctx, []outbox.Event{e})[0]
		tooLarge := publisher.IsPermanent(err) && strings.Contains(err.Error(), "record too large")
		if tooLarge == tt.fits {
			t.Errorf("format=%s: %v; want too large: %v", tt.format, err, !tt.fits)
		}
	}
}
