package eventid_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp091 "github.com/rabbitmq/amqp091-go"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/relay/internal/harness/amqptest"
	"github.com/outbox-relay/relay/internal/harness/kafkatest"
	"github.com/outbox-relay/relay/internal/harness/natstest"
	"github.com/outbox-relay/relay/pkg/inbox/eventid"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	_ "github.com/outbox-relay/relay/pkg/publisher/amqp"
	_ "github.com/outbox-relay/relay/pkg/publisher/kafka"
	_ "github.com/outbox-relay/relay/pkg/publisher/nats"
	"github.com/outbox-relay/relay/pkg/publisher/publishertest"
)

var ctx = context.Background()

// publish sends one event through the relay's own driver for rawURL, with a
// row header that tries to pass for the id, and returns the event's id.
func publish(t *testing.T, rawURL, eventType string) string {
	t.Helper()
	p, err := publisher.Open(ctx, rawURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(ctx) })
	e := outbox.Event{ID: uuid.Must(uuid.NewV7()), Type: eventType, PartitionKey: "k", Payload: []byte(`{}`),
		Headers: []byte(`{"x-event-id": "forged", "content-type": "application/json"}`)}
	publishertest.RequireDelivered(t, publishertest.Publish(t, p, e))
	return e.ID.String()
}

// What the NATS driver sends, read as a JetStream consumer reads it.
func TestNATSReadsWhatTheRelaySends(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	st := srv.Stream(t, jetstream.StreamConfig{Name: "IDS", Subjects: []string{"ids.>"}})
	want := publish(t, srv.URL(), "ids.created")

	cons, err := st.CreateConsumer(ctx, jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := cons.Next(jetstream.FetchMaxWait(30 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := eventid.NATS(msg.Headers()); got != want || err != nil {
		t.Fatalf("NATS(jetstream.Msg headers) = %q, %v; want %q", got, err, want)
	}
	// The core client's *nats.Msg carries the same header map.
	core := &natsgo.Msg{Header: msg.Headers()}
	if got, _ := eventid.NATS(core.Header); got != want {
		t.Fatalf("NATS(*nats.Msg header) = %q, want %q", got, want)
	}
	// Nats-Msg-Id alone (X-Event-ID removed by something in between).
	h := natsgo.Header{}
	h.Set(eventid.HeaderNATSMsgID, want)
	if got, _ := eventid.NATS(h); got != want {
		t.Fatalf("NATS(only Nats-Msg-Id) = %q, want %q", got, want)
	}
}

// What the Kafka driver sends, read with franz-go, and in kafka-go's and
// franz-go's header types.
func TestKafkaReadsWhatTheRelaySends(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t)
	c.CreateTopic(t, "ids.created", 1, nil)
	want := publish(t, c.URL("?timeout=5s"), "ids.created")
	rec := c.Records(t, "ids.created", 1)[0]
	if got, err := eventid.Kafka(rec.Headers); got != want || err != nil {
		t.Fatalf("Kafka([]kgo.RecordHeader) = %q, %v; want %q", got, err, want)
	}
	var segmentio []kafkago.Header
	for _, h := range rec.Headers {
		segmentio = append(segmentio, kafkago.Header{Key: h.Key, Value: h.Value})
	}
	if got, err := eventid.Kafka(segmentio); got != want || err != nil {
		t.Fatalf("Kafka([]kafka.Header) = %q, %v; want %q", got, err, want)
	}
	if _, err := eventid.Kafka([]kgo.RecordHeader{{Key: "other", Value: []byte("x")}}); !errors.Is(err, eventid.ErrMissing) {
		t.Fatalf("Kafka without X-Event-ID: %v, want ErrMissing", err)
	}
}

// What the AMQP driver sends, read from a real RabbitMQ queue.
func TestAMQPReadsWhatTheRelaySends(t *testing.T) {
	t.Parallel()
	ch := amqptest.Channel(t)
	exchange := amqptest.Exchange(t, ch, "topic")
	queue := amqptest.BoundQueue(t, ch, exchange, "ids.created."+uuid.NewString())
	want := publish(t, amqptest.DriverURL("", "exchange="+exchange), queue)
	d := amqptest.Drain(t, queue, 1)[0]
	if got, err := eventid.AMQP(d.MessageId, d.Headers); got != want || err != nil {
		t.Fatalf("AMQP(delivery) = %q, %v; want %q", got, err, want)
	}
	// Without the message-id property, the header.
	if got, _ := eventid.AMQP("", d.Headers); got != want {
		t.Fatalf("AMQP(no message id) = %q, want %q", got, want)
	}
	if got, _ := eventid.AMQP("", amqp091.Table{"X-Event-ID": []byte(want)}); got != want {
		t.Fatalf("AMQP(header as bytes) = %q, want %q", got, want)
	}
}

func TestWebhookAndRedis(t *testing.T) {
	t.Parallel()
	const id = "0190a3c4-5e6f-7a8b-9c0d-1e2f3a4b5c6d"
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, _ := eventid.Webhook(r.Header)
		got <- v
	}))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("{}"))
	req.Header.Set("webhook-id", id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if v := <-got; v != id {
		t.Fatalf("Webhook(r.Header) = %q, want %q", v, id)
	}
	if v, _ := eventid.Webhook(map[string][]string{"webhook-id": {id}}); v != id {
		t.Fatalf("Webhook(hand-made map) = %q", v)
	}
	if v, err := eventid.Redis(map[string]any{"id": id, "payload": "{}"}); v != id || err != nil {
		t.Fatalf("Redis = %q, %v", v, err)
	}
	if _, err := eventid.Redis(map[string]any{"payload": "{}"}); !errors.Is(err, eventid.ErrMissing) {
		t.Fatalf("Redis without id: %v", err)
	}
}

func TestCloudEvents(t *testing.T) {
	t.Parallel()
	const id = "A234-1234-1234"
	h := http.Header{}
	h.Set("ce-id", id)
	if v, err := eventid.CloudEventsHeaders(h); v != id || err != nil {
		t.Errorf("CloudEventsHeaders(http) = %q, %v", v, err)
	}
	if v, _ := eventid.CloudEventsHeaders(natsgo.Header{"ce-id": {id}}); v != id {
		t.Errorf("CloudEventsHeaders(nats) = %q", v)
	}
	if v, _ := eventid.CloudEventsKafka([]kafkago.Header{{Key: "ce_id", Value: []byte(id)}}); v != id {
		t.Errorf("CloudEventsKafka = %q", v)
	}
	if v, _ := eventid.CloudEventsAMQP(amqp091.Table{"cloudEvents:id": id}); v != id {
		t.Errorf("CloudEventsAMQP = %q", v)
	}
	if v, _ := eventid.CloudEventsAMQP(amqp091.Table{"cloudEvents_id": id}); v != id {
		t.Errorf("CloudEventsAMQP(JMS name) = %q", v)
	}
	if v, err := eventid.CloudEventsRedis(map[string]any{"ce_id": id, "payload": "{}"}); v != id || err != nil {
		t.Errorf("CloudEventsRedis = %q, %v", v, err)
	}
	if _, err := eventid.CloudEventsRedis(map[string]any{"id": id}); !errors.Is(err, eventid.ErrMissing) {
		t.Errorf("CloudEventsRedis without ce_id: %v, want ErrMissing", err)
	}
	if v, err := eventid.CloudEventsJSON([]byte(`{"specversion":"1.0","id":"` + id + `","source":"/x","type":"t"}`)); v != id || err != nil {
		t.Errorf("CloudEventsJSON = %q, %v", v, err)
	}
	for _, body := range []string{`{"id": 7}`, `{"specversion":"1.0"}`, `{"id": ""}`} {
		if _, err := eventid.CloudEventsJSON([]byte(body)); !errors.Is(err, eventid.ErrMissing) {
			t.Errorf("CloudEventsJSON(%s): %v, want ErrMissing", body, err)
		}
	}
	if _, err := eventid.CloudEventsJSON([]byte(`[1]`)); err == nil {
		t.Error("CloudEventsJSON accepted an array")
	}
}

// ErrMissing names where the id was looked for, so a log line says what
// the message lacked.
func TestMissingSaysWhere(t *testing.T) {
	t.Parallel()
	_, err := eventid.NATS(nil)
	if !errors.Is(err, eventid.ErrMissing) || !strings.Contains(err.Error(), "X-Event-ID") || !strings.Contains(err.Error(), "Nats-Msg-Id") {
		t.Fatalf("NATS(nil) = %v", err)
	}
}

// The inbox and the id readers link no broker client and no database
// driver, and inboxpgx links pgx alone: a consumer of one broker on one
// database carries nothing else.
func TestLinksNoClients(t *testing.T) {
	t.Parallel()
	forbidden := []string{"nats-io", "segmentio", "twmb/franz-go", "rabbitmq", "redis", "go-sql-driver", "jackc/pgx", "lib/pq"}
	for pkg, allowed := range map[string]string{
		"github.com/outbox-relay/relay/pkg/inbox":          "",
		"github.com/outbox-relay/relay/pkg/inbox/eventid":  "",
		"github.com/outbox-relay/relay/pkg/inbox/inboxpgx": "jackc/pgx",
	} {
		out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, f := range forbidden {
				if strings.Contains(dep, f) && (allowed == "" || !strings.Contains(dep, allowed)) {
					t.Errorf("%s links %s", pkg, dep)
				}
			}
		}
	}
}
