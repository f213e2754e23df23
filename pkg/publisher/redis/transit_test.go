package redis_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/internal/harness/redistest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher/publishertest"
)

// TestValuesArriveAsWritten checks with the real Redis what the
// conformance suite cannot: event types that make odd stream names, and
// odd header names. Redis strings are binary safe, so each must arrive as
// written: the stream is prefix + event_type byte for byte, every field
// h:<name> holds its value, names differing in letter case stay apart.
func TestValuesArriveAsWritten(t *testing.T) {
	t.Parallel()
	admin := redistest.Shared(t)
	prefix := redistest.Prefix(t, admin)
	pub := openPublisher(t, redistest.URL()+"?stream_prefix="+prefix)

	types := []string{"  spaced type  ", "line1\r\nline2", "nul\x00", "\xff\xfe", "*", "Grüße"}
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
		batch[i] = outbox.Event{ID: uuid.New(), Type: typ, PartitionKey: "  key\r\n\xff", Payload: []byte("{}"), Headers: raw}
	}
	publishertest.RequireDelivered(t, publishertest.Publish(t, pub, batch...))

	for _, e := range batch {
		got := redistest.Entries(t, admin, prefix+e.Type, 1)
		if len(got) != 1 {
			t.Fatalf("stream %q holds %d entries, want 1", prefix+e.Type, len(got))
		}
		m := got[0]
		if id := redistest.Field(m, "id"); id != e.ID.String() {
			t.Errorf("stream %q: entry id %q, want %s", e.Type, id, e.ID)
		}
		if k := redistest.Field(m, "partition_key"); k != e.PartitionKey {
			t.Errorf("partition key %q arrived as %q", e.PartitionKey, k)
		}
		for k, v := range headers {
			if got, ok := m.Values["h:"+k]; !ok || got != v {
				t.Errorf("stream %q: header %q = %q arrived as %#v", e.Type, k, v, got)
			}
		}
		if n := len(m.Values); n != len(headers)+3 {
			t.Errorf("stream %q: entry has %d fields, want %d", e.Type, n, len(headers)+3)
		}
	}
}
