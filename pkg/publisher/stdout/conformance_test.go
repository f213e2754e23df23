package stdout_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/internal/syncbuf"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/publishertest"
	"github.com/outbox-relay/relay/pkg/publisher/stdout"
)

// stdoutBroker is the publisher's output, parsed back.
type stdoutBroker struct{ syncbuf.Buffer }

func (b *stdoutBroker) Open(*testing.T) publisher.Publisher { return stdout.New(b) }

func (b *stdoutBroker) Destination(*testing.T) string { return "stdout." + uuid.NewString() }

func (b *stdoutBroker) Received(t *testing.T, eventType string, _ int) []publishertest.Message {
	var out []publishertest.Message
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		var l struct {
			EventID      string            `json:"event_id"`
			EventType    string            `json:"event_type"`
			PartitionKey string            `json:"partition_key"`
			Headers      map[string]string `json:"headers"`
			Payload      json.RawMessage   `json:"payload"`
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if l.EventType != eventType {
			continue
		}
		// The stdout line names the event itself; headers hold only the
		// row's own, so add the standard ones as the line carries them.
		h := map[string]string{outbox.HeaderEventType: l.EventType}
		if l.PartitionKey != "" {
			h[outbox.HeaderPartitionKey] = l.PartitionKey
		}
		for k, v := range l.Headers {
			h[k] = v
		}
		out = append(out, publishertest.Message{ID: l.EventID, Type: l.EventType, Key: l.PartitionKey, Payload: l.Payload, Headers: h})
	}
	return out
}

func TestConformance(t *testing.T) {
	publishertest.Run(t, publishertest.Driver{
		NewBroker: func(*testing.T) publishertest.Broker { return &stdoutBroker{} },
		// A JSON string holds only UTF-8; header values come from JSON and
		// are UTF-8 already.
		Refuses: func(field, v string) bool { return field == "partition_key" && !utf8.ValidString(v) },
		Permanent: []publishertest.PermanentCase{
			{Name: "headers not an object", Event: outbox.Event{Headers: []byte(`"x"`)}, WantErr: "headers must be a JSON object"},
			{Name: "header holds an array", Event: outbox.Event{Headers: []byte(`{"a":[1]}`)}, WantErr: `header "a"`},
		},
	})
}
