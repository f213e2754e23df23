package nats_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/relay/internal/harness/natstest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/publishertest"
)

// TestValuesNATSWouldAlterGoDead is issue 20's report: nats.go trims the
// white space around a header value and turns line breaks into spaces, so
// a partition key "  spaced key  " arrived as "spaced key", "line1\r\nline2"
// as "line1  line2", and a header value "  padded  " as "padded". Each
// such event must go DEAD naming the field and the rule, and the events
// around it arrive.
func TestValuesNATSWouldAlterGoDead(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	ordersStream(t, srv, jetstream.StreamConfig{})
	pub := open(t, srv, "")

	cases := []struct {
		bad  outbox.Event
		want []string
	}{
		{event("orders.created", "  spaced key  ", "{}", ""),
			[]string{`partition_key "  spaced key  "`, "X-Partition-Key", "white space"}},
		{event("orders.created", "line1\r\nline2", "{}", ""),
			[]string{`partition_key "line1\r\nline2"`, "line break"}},
		{event("orders.created", "k", "{}", `{"note":"  padded  "}`),
			[]string{`header "note"`, "white space"}},
		{event("orders.created", "k", "{}", `{"note":"tab\t"}`),
			[]string{`header "note"`, "white space"}},
		{event("orders.created", "k", "{}", `{"note":"a\nb"}`),
			[]string{`header "note"`, "line break"}},
	}
	var batch []outbox.Event
	for i, c := range cases {
		batch = append(batch, event("orders.created", "k", "good", ""), c.bad)
		if i == len(cases)-1 {
			batch = append(batch, event("orders.created", "k", "good", ""))
		}
	}
	errs := publishertest.Publish(t, pub, batch...)
	var good []outbox.Event
	for i, err := range errs {
		if i%2 == 0 {
			if err != nil {
				t.Fatalf("good event %d: %v", i, err)
			}
			good = append(good, batch[i])
			continue
		}
		c := cases[i/2]
		if !publisher.IsPermanent(err) || publisher.IsUnavailable(err) {
			t.Fatalf("key %q headers %s: %v, want DEAD", c.bad.PartitionKey, c.bad.Headers, err)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q does not say %q", err, w)
			}
		}
	}
	requireStored(t, srv, good)
}

// TestValuesNATSCanCarryArriveAsWritten sends what NATS headers do carry
// as written, however odd: inner runs of spaces, control characters other
// than line breaks, bytes that are not UTF-8, names that differ only in
// letter case (NATS names are case-sensitive). A rule drawn too wide would
// send these DEAD; a driver that altered them would fail the comparison.
func TestValuesNATSCanCarryArriveAsWritten(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	ordersStream(t, srv, jetstream.StreamConfig{})
	pub := open(t, srv, "")

	keys := []string{"inner  spaces", "tab\tinside", "nul\x00del\x7f", "\vform\f", "\xff\xfe", "\u00a0nbsp\u00a0", "日本 語"}
	batch := make([]outbox.Event, len(keys))
	for i, k := range keys {
		batch[i] = event("orders.created", k, "{}", `{"Tenant":"a  b","tenant":"\u0000\u001f","TENANT":"\u00a0x\u3000","empty":""}`)
	}
	publishertest.RequireDelivered(t, publishertest.Publish(t, pub, batch...))

	msgs := stored(t, srv, "ORDERS")
	if len(msgs) != len(keys) {
		t.Fatalf("stream holds %d messages, want %d", len(msgs), len(keys))
	}
	for i, m := range msgs {
		want := map[string]string{
			outbox.HeaderPartitionKey: keys[i],
			"Tenant":                  "a  b",
			"tenant":                  "\x00\x1f",
			"TENANT":                  "\u00a0x\u3000",
			"empty":                   "",
		}
		for k, v := range want {
			if got := m.Header.Values(k); !slices.Equal(got, []string{v}) {
				t.Errorf("message %d header %s = %q, want %q", i, k, got, v)
			}
		}
	}
}
