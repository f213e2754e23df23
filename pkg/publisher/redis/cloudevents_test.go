package redis_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	goredis "github.com/redis/go-redis/v9"

	"github.com/outbox-relay/relay/internal/harness/cetest"
	"github.com/outbox-relay/relay/internal/harness/redistest"
	"github.com/outbox-relay/relay/pkg/inbox/eventid"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/publishertest"
)

// decode reads an entry as cetest.Redis says: ce_ fields, the payload
// field as the data.
func decode(t *testing.T, m goredis.XMessage) (map[string]string, []byte) {
	t.Helper()
	h := map[string]string{}
	for k, v := range m.Values {
		h[k], _ = v.(string)
	}
	return h, []byte(h["payload"])
}

func TestCloudEventsDecodeWithTheSDK(t *testing.T) {
	t.Parallel()
	admin := redistest.Shared(t)
	prefix := redistest.Prefix(t, admin)
	ctx := publisher.WithTable(context.Background(), "outbox")
	pub, err := publisher.Open(ctx, redistest.URL()+"?format=cloudevents&stream_prefix="+prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close(context.Background()) })

	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	e := outbox.Event{ID: uuid.Must(uuid.NewV7()), Type: "orders.created", PartitionKey: "customer 7 α",
		Payload:   []byte{0, 0xff, '\n'},
		Headers:   []byte(`{"content-type":"application/octet-stream","traceparent":"` + tp + `","tenant":"acme"}`),
		CreatedAt: time.Date(2026, 11, 23, 4, 5, 6, 7, time.UTC)}
	plain := outbox.Event{ID: uuid.Must(uuid.NewV7()), Type: "orders.created", Payload: []byte("x"), CreatedAt: time.Now()}
	publishertest.RequireDelivered(t, publishertest.Publish(t, pub, e, plain))

	got := redistest.Entries(t, admin, prefix+"orders.created", 2)
	if len(got) != 2 {
		t.Fatalf("stream holds %d entries, want 2", len(got))
	}
	if id, err := eventid.CloudEventsRedis(got[0].Values); id != e.ID.String() {
		t.Errorf("eventid.CloudEventsRedis = %q, %v; want %s", id, err, e.ID)
	}
	h, body := decode(t, got[0])
	ev, err := cetest.Headers(cetest.Redis, h, body)
	if err != nil {
		t.Fatalf("the SDK cannot decode the entry: %v (fields %v)", err, h)
	}
	cetest.Check(t, ev, e, cetest.Want{Source: "/outbox", DataContentType: "application/octet-stream", Traceparent: tp})
	for _, k := range []string{"id", "partition_key"} {
		if v, ok := h[k]; ok {
			t.Errorf("field %s = %q written with format=cloudevents", k, v)
		}
	}
	if h["h:tenant"] != "acme" || h["ce_partitionkey"] != e.PartitionKey {
		t.Errorf("fields %v: want the row's headers as h: fields and the key as it is", h)
	}

	h, body = decode(t, got[1])
	if ev, err = cetest.Headers(cetest.Redis, h, body); err != nil {
		t.Fatalf("the SDK cannot decode the entry: %v", err)
	}
	cetest.Check(t, ev, plain, cetest.Want{Source: "/outbox"})
}

func TestCloudEventsCountTowardMaxEntryBytes(t *testing.T) {
	t.Parallel()
	admin := redistest.Shared(t)
	prefix := redistest.Prefix(t, admin)
	e := outbox.Event{ID: uuid.New(), Type: "t", Payload: []byte(strings.Repeat("x", 400)), CreatedAt: time.Now()}
	// stream, id and payload: fits 500 bytes; with the attributes it does not.
	q := "?max_entry_bytes=500&stream_prefix=" + prefix
	publishertest.RequireDelivered(t, publishertest.Publish(t, openPublisher(t, redistest.URL()+q), e))
	err := publishertest.Publish(t, openPublisher(t, redistest.URL()+q+"&format=cloudevents"), e)[0]
	if !publisher.IsPermanent(err) || !strings.Contains(err.Error(), "entry too large") {
		t.Errorf("with CloudEvents attributes: %v, want permanent, entry too large", err)
	}
}

func TestCloudEventsOptions(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ query, want string }{
		{"?format=cloud", `format="cloud" is not one of relay`},
		{"?ce_source=/x", "needs format=cloudevents"},
	} {
		if _, err := publisher.Open(context.Background(), "redis://127.0.0.1:1"+tt.query); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error containing %q", tt.query, err, tt.want)
		}
	}
}
