package kafka_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/relay/internal/harness/kafkatest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher/publishertest"
)

// TestValuesArriveAsWritten checks what the conformance suite cannot:
// event types that only a header carries (with topic=, every event goes to
// one topic), and odd header names. Kafka keys and header values are
// bytes and header names are length-prefixed strings, so each must arrive
// as written, names that differ in letter case as two headers.
func TestValuesArriveAsWritten(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t, kfake.NumBrokers(1))
	topic := newTopic()
	c.CreateTopic(t, topic, 1, nil)
	pub := open(t, c.URL("?topic="+topic))

	types := []string{"  spaced type  ", "line1\r\nline2", "nul\x00", "\xff\xfe", "Grüße"}
	headers := map[string]string{"Tenant": "a", "tenant": "b", " spaced name ": "c", "a\r\nb": "d", "é": "e", "": "f"}
	for i, v := range publishertest.HostileValues {
		if utf8.ValidString(v) {
			headers[fmt.Sprintf("v%d", i)] = v
		}
	}
	raw, err := json.Marshal(headers)
	if err != nil {
		t.Fatal(err)
	}
	batch := make([]outbox.Event, len(types))
	for i, typ := range types {
		batch[i] = event(typ, "  key\r\n\xff\x00", "{}", string(raw))
	}
	publishertest.RequireDelivered(t, publishertest.Publish(t, pub, batch...))

	got := c.Records(t, topic, len(batch))
	for i, r := range got {
		e := batch[i]
		if string(r.Key) != e.PartitionKey {
			t.Errorf("key %q arrived as %q", e.PartitionKey, r.Key)
		}
		want := map[string]string{outbox.HeaderEventType: e.Type, outbox.HeaderPartitionKey: e.PartitionKey, outbox.HeaderEventID: e.ID.String()}
		for k, v := range headers {
			want[k] = v
		}
		seen := map[string]int{}
		for _, h := range r.Headers {
			seen[h.Key]++
			if v, ok := want[h.Key]; !ok || string(h.Value) != v {
				t.Errorf("record %d: header %q = %q, want %q (sent: %v)", i, h.Key, h.Value, v, ok)
			}
		}
		for k := range want {
			if seen[k] != 1 {
				t.Errorf("record %d: header %q arrived %d times, want once", i, k, seen[k])
			}
		}
	}
}
