package redis_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"
	goredis "github.com/redis/go-redis/v9"

	"github.com/outbox-relay/relay/internal/harness/redistest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/publishertest"
)

// wrongType is an event type whose stream key every conformance broker
// fills with a string, so XADD to it answers WRONGTYPE.
var wrongType = "wrongtype." + uuid.NewString()

// redisBroker is a redis-server of the subtest's own, so the outage case can
// shut it down and start it again. Its streams are under a unique prefix all
// the same, as on the shared server.
type redisBroker struct {
	srv    *redistest.Server
	admin  *goredis.Client
	prefix string
}

func newRedisBroker(t *testing.T) *redisBroker {
	t.Helper()
	srv := redistest.Start(t)
	admin := redistest.Client(t, srv.URL())
	b := &redisBroker{srv: srv, admin: admin, prefix: redistest.Prefix(t, admin)}
	if err := admin.Set(context.Background(), b.prefix+wrongType, "not a stream", 0).Err(); err != nil {
		t.Fatal(err)
	}
	return b
}

func (b *redisBroker) Open(t *testing.T) publisher.Publisher {
	// A small max_entry_bytes makes "too large" testable without a
	// 512 MiB event.
	return openPublisher(t, b.srv.URL()+"?stream_prefix="+b.prefix+"&max_entry_bytes=65536&read_timeout=2s&write_timeout=2s&dial_timeout=2s")
}

func (b *redisBroker) Destination(*testing.T) string {
	// Streams come into being with their first entry.
	return "dest." + uuid.NewString()
}

func (b *redisBroker) Received(t *testing.T, eventType string, want int) []publishertest.Message {
	var out []publishertest.Message
	for _, m := range redistest.Entries(t, b.admin, b.prefix+eventType, want) {
		out = append(out, message(t, eventType, m))
	}
	return out
}

// message maps an entry onto the suite's form: the stream name (less the
// prefix) is the event type, h:<name> fields are the headers.
func message(t *testing.T, eventType string, m goredis.XMessage) publishertest.Message {
	t.Helper()
	h := map[string]string{outbox.HeaderEventType: eventType}
	for k, v := range m.Values {
		s, ok := v.(string)
		if !ok {
			t.Fatalf("entry %s field %s is %T, not a string", m.ID, k, v)
		}
		switch {
		case strings.HasPrefix(k, "h:"):
			h[strings.TrimPrefix(k, "h:")] = s
		case k == "partition_key":
			h[outbox.HeaderPartitionKey] = s
		case k != "id" && k != "payload":
			t.Errorf("entry %s has an unexpected field %q", m.ID, k)
		}
	}
	return publishertest.Message{
		ID:      redistest.Field(m, "id"),
		Type:    eventType,
		Key:     redistest.Field(m, "partition_key"),
		Payload: []byte(redistest.Field(m, "payload")),
		Headers: h,
	}
}

func (b *redisBroker) Stop(t *testing.T)  { b.srv.Stop(t) }
func (b *redisBroker) Start(t *testing.T) { b.srv.Start(t) }

func TestConformance(t *testing.T) {
	t.Parallel()
	publishertest.Run(t, publishertest.Driver{
		NewBroker: func(t *testing.T) publishertest.Broker { return newRedisBroker(t) },
		// The id field is the event id; no header repeats it.
		HeaderEventID: false,
		Permanent: []publishertest.PermanentCase{
			{Name: "key holds another type", Event: outbox.Event{Type: wrongType}, KeepType: true, WantErr: "not a stream"},
			{Name: "too large", Event: outbox.Event{Payload: make([]byte, 100*1024)}, WantErr: "entry too large"},
			{Name: "large header", Event: outbox.Event{Headers: []byte(`{"big":"` + strings.Repeat("x", 70*1024) + `"}`)}, WantErr: "max_entry_bytes=65536"},
			{Name: "headers not an object", Event: outbox.Event{Headers: []byte(`["x"]`)}, WantErr: "headers must be a JSON object"},
			{Name: "header holds an object", Event: outbox.Event{Headers: []byte(`{"meta":{"a":1}}`)}, WantErr: `header "meta"`},
		},
	})
}

// openPublisher opens the driver through publisher.Open and closes it at
// the end of the test.
func openPublisher(t testing.TB, rawURL string) publisher.Publisher {
	t.Helper()
	p, err := publisher.Open(context.Background(), rawURL)
	if err != nil {
		t.Fatalf("publisher.Open: %v", err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}
