package nats_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/natstest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/publishertest"
)

// natsBroker gives each subtest an in-process server of its own.
type natsBroker struct {
	srv     *natstest.Server
	streams map[string]jetstream.Stream
}

func (b *natsBroker) Open(t *testing.T) publisher.Publisher {
	p, err := publisher.Open(context.Background(), b.srv.URL()+"?timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

func (b *natsBroker) Destination(t *testing.T) string {
	name := "S" + strings.ReplaceAll(uuid.NewString(), "-", "")
	b.streams[name] = b.srv.Stream(t, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, MaxMsgSize: 64 * 1024})
	return name + ".event"
}

func (b *natsBroker) Received(t *testing.T, eventType string, want int) []publishertest.Message {
	st := b.streams[strings.TrimSuffix(eventType, ".event")]
	eventually.True(t, 30*time.Second, func() bool { return natstest.Count(t, st) >= uint64(want) },
		func() string { return fmt.Sprintf("%d messages in the stream", want) })
	var out []publishertest.Message
	for _, m := range natstest.Messages(t, st) {
		h := map[string]string{}
		for k := range m.Header {
			h[k] = m.Header.Get(k)
		}
		out = append(out, publishertest.Message{
			ID: m.Header.Get("Nats-Msg-Id"), Type: m.Subject, Key: m.Header.Get(outbox.HeaderPartitionKey),
			Payload: m.Data, Headers: h,
		})
	}
	return out
}

func (b *natsBroker) Stop(*testing.T)  { b.srv.Stop() }
func (b *natsBroker) Start(*testing.T) { b.srv.Restart() }
func (b *natsBroker) Drop(*testing.T)  { b.srv.Kick("outbox-relay") }

func TestConformance(t *testing.T) {
	publishertest.Run(t, publishertest.Driver{
		NewBroker: func(t *testing.T) publishertest.Broker {
			srv := natstest.Start(t, func(o *server.Options) { o.MaxPayload = 128 * 1024 })
			return &natsBroker{srv: srv, streams: map[string]jetstream.Stream{}}
		},
		HeaderEventID: true,
		Refuses:       mimeAltered,
		Permanent: []publishertest.PermanentCase{
			{Name: "no stream", Event: outbox.Event{Type: "nowhere.event"}, KeepType: true, WantErr: "no JetStream stream captures subject"},
			{Name: "too large for the stream", Event: outbox.Event{Payload: make([]byte, 100*1024)}, WantErr: "too large"},
			{Name: "too large for the server", Event: outbox.Event{Payload: make([]byte, 200*1024)}, WantErr: "too large"},
			{Name: "invalid subject", Event: outbox.Event{Type: "a..b"}, KeepType: true, WantErr: "invalid subject"},
			{Name: "subject over the control line", Event: outbox.Event{Type: strings.Repeat("s", 5000)}, KeepType: true, WantErr: "max_control_line"},
			{Name: "headers over 64 KiB", Event: outbox.Event{Headers: []byte(`{"big":"` + strings.Repeat("v", 70000) + `"}`)}, WantErr: "65535"},
			{Name: "header name not ASCII", Event: outbox.Event{Headers: []byte(`{"naïve":"v"}`)}, WantErr: "invalid NATS header name"},
			{Name: "headers not an object", Event: outbox.Event{Headers: []byte(`["x"]`)}, WantErr: "headers must be a JSON object"},
			{Name: "header holds an object", Event: outbox.Event{Headers: []byte(`{"meta":{"a":1}}`)}, WantErr: `header "meta"`},
		},
	})
}

// mimeAltered is the documented rule for what NATS headers cannot carry
// as written: nats.go turns CR and LF into spaces and trims spaces and tabs
// around a value. Everything else, control characters and bytes that are
// not UTF-8 included, arrives as written.
func mimeAltered(_, v string) bool {
	return strings.ContainsAny(v, "\r\n") || strings.Trim(v, " \t") != v
}
