// Package publishertest is the conformance suite every publisher driver
// runs against a real broker: a batch arrives complete with ids and headers,
// per-key order is kept, odd values arrive byte for byte or are refused,
// permanent and unavailable errors are classified, events the broker can
// never take do not disturb the many good ones around them, a broker that
// goes away yields unavailable and the driver recovers when it is back, a
// connection the broker drops is replaced before Ping says healthy, and
// Close is idempotent. A driver's test describes its
// broker with a Driver and calls Run.
package publishertest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
)

// Message is what a broker delivered, in the driver-independent form the
// suite checks. Drivers map their broker's fields onto it: the event id may
// travel as a header or as the broker's own message id.
type Message struct {
	ID      string
	Type    string
	Key     string
	Payload []byte
	Headers map[string]string
}

// Broker is a broker set up for one subtest.
type Broker interface {
	// Open connects the driver under test, closed at the end of the test.
	Open(t *testing.T) publisher.Publisher
	// Destination creates somewhere events can go (a stream, topic or bound
	// queue) that no other subtest uses, and returns an event type the
	// driver routes there.
	Destination(t *testing.T) string
	// Received returns every message that arrived for eventType, waiting
	// until want have arrived or a deadline passes. Messages with the same
	// key must be in broker order.
	Received(t *testing.T, eventType string, want int) []Message
}

// Outage is a Broker that can be taken away and brought back.
type Outage interface {
	Broker
	// Stop makes the broker unreachable for connections open and new.
	Stop(t *testing.T)
	// Start brings it back.
	Start(t *testing.T)
}

// Dropper is a Broker that can close the driver's connections while it
// stays up, as a broker does to a client it will not serve.
type Dropper interface {
	Broker
	// Drop closes every connection the driver has open to the broker; new
	// ones are accepted at once.
	Drop(t *testing.T)
}

// PermanentCase is an event that can never be delivered: one over a limit
// of the broker (size, name, headers), or one the broker refuses.
type PermanentCase struct {
	Name string
	// Event is sent with its Type replaced by a destination's event type
	// unless KeepType is set.
	Event    outbox.Event
	KeepType bool
	// WantErr is a substring the error must contain, naming the problem.
	WantErr string
}

// Driver describes a driver to the suite.
type Driver struct {
	// NewBroker gives each subtest a broker of its own (or a shared broker
	// with private destinations). If it returns an Outage, the outage test
	// runs.
	NewBroker func(t *testing.T) Broker
	// Permanent lists the driver's permanent failures.
	Permanent []PermanentCase
	// HeaderEventID is false for drivers that carry the event id in the
	// broker's own message id field only.
	HeaderEventID bool
	// Refuses is the driver's documented rule for the values it will not
	// carry, because its broker would alter them: field is "partition_key"
	// or "header" (a row header's value). ValuesArriveAsWritten sends
	// hostile values and checks that each value the rule lets through
	// arrives byte for byte, and each other one fails permanently, naming
	// its field. nil means the driver carries every value as written.
	Refuses func(field, value string) bool
	// UnavailableWithin bounds how long a publish to a broker that has gone
	// away may take before it reports unavailable; default 15 s.
	UnavailableWithin time.Duration
}

// Run runs the suite.
func Run(t *testing.T, d Driver) {
	if d.UnavailableWithin == 0 {
		d.UnavailableWithin = 15 * time.Second
	}
	t.Run("BatchArrivesComplete", func(t *testing.T) { t.Parallel(); batchArrivesComplete(t, d) })
	t.Run("PerKeyOrder", func(t *testing.T) { t.Parallel(); perKeyOrder(t, d) })
	t.Run("PermanentErrors", func(t *testing.T) { t.Parallel(); permanentErrors(t, d) })
	t.Run("PermanentAmongMany", func(t *testing.T) { t.Parallel(); permanentAmongMany(t, d) })
	t.Run("ValuesArriveAsWritten", func(t *testing.T) { t.Parallel(); valuesArriveAsWritten(t, d) })
	t.Run("UnavailableThenRecovers", func(t *testing.T) { t.Parallel(); unavailableThenRecovers(t, d) })
	t.Run("DroppedConnectionIsReplaced", func(t *testing.T) { t.Parallel(); droppedConnectionIsReplaced(t, d) })
	t.Run("CloseIsIdempotent", func(t *testing.T) { t.Parallel(); closeIsIdempotent(t, d) })
}

// Publish sends batch through p with a minute's deadline and returns one
// result per event; a driver that answers another count fails the test.
func Publish(t testing.TB, p publisher.Publisher, batch ...outbox.Event) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := p.Publish(ctx, batch)
	if len(errs) != len(batch) {
		t.Fatalf("Publish returned %d results for %d events", len(errs), len(batch))
	}
	return errs
}

// RequireDelivered fails the test at the first event Publish did not deliver.
func RequireDelivered(t testing.TB, errs []error) {
	t.Helper()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
	}
}

// RequireRefused checks a URL the driver must refuse: parseErr, from the
// driver's own ParseURL, says want; publisher.Open refuses it as well,
// without connecting; and neither error reveals secret (the URL's password).
func RequireRefused(t testing.TB, rawURL string, parseErr error, want, secret string) {
	t.Helper()
	if parseErr == nil || !strings.Contains(parseErr.Error(), want) {
		t.Fatalf("ParseURL(%q): %v, want an error saying %q", rawURL, parseErr, want)
	}
	_, openErr := publisher.Open(context.Background(), rawURL)
	if openErr == nil {
		t.Fatalf("publisher.Open(%q) accepted it", rawURL)
	}
	for _, err := range []error{parseErr, openErr} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error %q reveals the password", err)
		}
	}
}

func event(eventType, key string, n int) outbox.Event {
	return outbox.Event{
		ID:           uuid.Must(uuid.NewV7()),
		Type:         eventType,
		PartitionKey: key,
		Payload:      []byte(fmt.Sprintf(`{"n":%d}`, n)),
		// A row header that pretends to be the event's id must not reach
		// the broker next to the real one.
		Headers:   []byte(fmt.Sprintf(`{"tenant":"acme","n":%d,"flag":true,"x-event-id":"forged","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`, n)),
		CreatedAt: time.Now(),
	}
}

func batchArrivesComplete(t *testing.T, d Driver) {
	b := d.NewBroker(t)
	p := b.Open(t)
	typ := b.Destination(t)
	batch := make([]outbox.Event, 50)
	for i := range batch {
		key := fmt.Sprintf("key-%d", i%5)
		if i%10 == 9 {
			key = "" // a NULL partition_key
		}
		batch[i] = event(typ, key, i)
	}
	RequireDelivered(t, Publish(t, p, batch...))

	got := b.Received(t, typ, len(batch))
	if len(got) != len(batch) {
		t.Fatalf("received %d messages, want %d", len(got), len(batch))
	}
	byID := map[string]Message{}
	for _, m := range got {
		if _, dup := byID[m.ID]; dup {
			t.Fatalf("event %s arrived twice", m.ID)
		}
		byID[m.ID] = m
	}
	for i, e := range batch {
		m, ok := byID[e.ID.String()]
		if !ok {
			t.Fatalf("event %d (%s) did not arrive", i, e.ID)
		}
		if m.Type != e.Type || m.Key != e.PartitionKey || string(m.Payload) != string(e.Payload) {
			t.Fatalf("event %d arrived as type %q key %q payload %q; sent %q %q %q",
				i, m.Type, m.Key, m.Payload, e.Type, e.PartitionKey, e.Payload)
		}
		want := map[string]string{
			"tenant":                  "acme",
			"n":                       fmt.Sprint(i),
			"flag":                    "true",
			outbox.HeaderTraceparent:  "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			outbox.HeaderEventType:    e.Type,
			outbox.HeaderPartitionKey: e.PartitionKey,
		}
		if e.PartitionKey == "" {
			delete(want, outbox.HeaderPartitionKey)
			if _, has := m.Headers[outbox.HeaderPartitionKey]; has {
				t.Errorf("event %d has no key but carries %s", i, outbox.HeaderPartitionKey)
			}
		}
		if d.HeaderEventID {
			want[outbox.HeaderEventID] = e.ID.String()
		}
		for k, v := range want {
			if m.Headers[k] != v {
				t.Errorf("event %d header %s = %q, want %q", i, k, m.Headers[k], v)
			}
		}
		for k, v := range m.Headers {
			if v == "forged" {
				t.Errorf("event %d carries the row's %s header next to the driver's own", i, k)
			}
		}
	}
}

func perKeyOrder(t *testing.T, d Driver) {
	b := d.NewBroker(t)
	p := b.Open(t)
	typ := b.Destination(t)
	const n = 400
	batch := make([]outbox.Event, n)
	pos := map[string]int{}
	for i := range batch {
		batch[i] = event(typ, fmt.Sprintf("k%d", i%4), i)
		pos[batch[i].ID.String()] = i
	}
	// Two batches, as two claims in a row would publish them.
	RequireDelivered(t, Publish(t, p, batch[:n/2]...))
	RequireDelivered(t, Publish(t, p, batch[n/2:]...))

	last := map[string]int{}
	got := b.Received(t, typ, n)
	if len(got) != n {
		t.Fatalf("received %d messages, want %d", len(got), n)
	}
	for _, m := range got {
		i, ok := pos[m.ID]
		if !ok {
			t.Fatalf("message %q is none of the events sent", m.ID)
		}
		if prev, ok := last[m.Key]; ok && i < prev {
			t.Fatalf("key %s: event %d arrived after event %d", m.Key, i, prev)
		}
		last[m.Key] = i
	}
}

func permanentErrors(t *testing.T, d Driver) {
	if len(d.Permanent) == 0 {
		t.Fatal("a driver must list its permanent failures")
	}
	b := d.NewBroker(t)
	p := b.Open(t)
	typ := b.Destination(t)
	for _, c := range d.Permanent {
		t.Run(c.Name, func(t *testing.T) {
			bad := c.Event
			bad.ID = uuid.Must(uuid.NewV7())
			if !c.KeepType {
				bad.Type = typ
			}
			batch := []outbox.Event{event(typ, "k", 0), bad, event(typ, "k", 1)}
			errs := Publish(t, p, batch...)
			if errs[0] != nil || errs[2] != nil {
				t.Fatalf("good events around a bad one failed: %v, %v", errs[0], errs[2])
			}
			switch err := errs[1]; {
			case err == nil:
				t.Fatal("bad event was accepted")
			case !publisher.IsPermanent(err):
				t.Fatalf("error %q is not permanent", err)
			case publisher.IsUnavailable(err):
				t.Fatalf("error %q is both permanent and unavailable", err)
			case !strings.Contains(err.Error(), c.WantErr):
				t.Fatalf("error %q does not mention %q", err, c.WantErr)
			}
		})
	}
}

// permanentAmongMany sends every permanent case at once, spread through a
// batch of many good events: each bad event fails permanently on its own,
// every good one arrives exactly once, and the next batch goes through. A
// driver that let a bad event reach the broker, and the broker close the
// connection over it, fails here.
func permanentAmongMany(t *testing.T, d Driver) {
	if len(d.Permanent) == 0 {
		t.Fatal("a driver must list its permanent failures")
	}
	b := d.NewBroker(t)
	p := b.Open(t)
	typ := b.Destination(t)
	const goodCount = 150
	batch := make([]outbox.Event, goodCount)
	for n := range batch {
		batch[n] = event(typ, fmt.Sprintf("key-%d", n%7), n)
	}
	bad := map[uuid.UUID]PermanentCase{}
	for k, c := range d.Permanent {
		e := c.Event
		e.ID = uuid.Must(uuid.NewV7())
		if !c.KeepType {
			e.Type = typ
		}
		bad[e.ID] = c
		// Spread evenly; k counts the bad events inserted before.
		batch = slices.Insert(batch, (k+1)*goodCount/(len(d.Permanent)+1)+k, e)
	}
	errs := Publish(t, p, batch...)
	for i, err := range errs {
		c, isBad := bad[batch[i].ID]
		switch {
		case !isBad && err != nil:
			t.Fatalf("good event %d failed next to the bad ones: %v", i, err)
		case !isBad:
		case err == nil:
			t.Fatalf("bad event %q was accepted", c.Name)
		case !publisher.IsPermanent(err) || publisher.IsUnavailable(err):
			t.Fatalf("bad event %q: %q, want permanent only", c.Name, err)
		case !strings.Contains(err.Error(), c.WantErr):
			t.Fatalf("bad event %q: %q does not mention %q", c.Name, err, c.WantErr)
		}
	}
	next := []outbox.Event{event(typ, "key-0", goodCount), event(typ, "key-1", goodCount+1)}
	RequireDelivered(t, Publish(t, p, next...))

	want := map[string]bool{}
	for _, e := range append(batch, next...) {
		if _, isBad := bad[e.ID]; !isBad {
			want[e.ID.String()] = true
		}
	}
	got := b.Received(t, typ, len(want))
	seen := map[string]bool{}
	for _, m := range got {
		switch {
		case !want[m.ID]:
			t.Fatalf("message %q is none of the good events: a bad event arrived", m.ID)
		case seen[m.ID]:
			t.Fatalf("event %s arrived twice", m.ID)
		}
		seen[m.ID] = true
	}
	if len(seen) != len(want) {
		t.Fatalf("%d good events arrived, want %d", len(seen), len(want))
	}
}

// droppedConnectionIsReplaced has the broker close the driver's connections
// while it stays up. Ping must report healthy within seconds, and only once
// the driver can publish again: the relay reads "Ping healthy, publish
// fails" as a batch that breaks the connection, and splits it to find the
// culprit.
func droppedConnectionIsReplaced(t *testing.T, d Driver) {
	b := d.NewBroker(t)
	dr, ok := b.(Dropper)
	if !ok {
		t.Skip("this broker cannot drop connections")
	}
	p := dr.Open(t)
	typ := dr.Destination(t)
	RequireDelivered(t, Publish(t, p, event(typ, "k", 0)))

	for round := 1; round <= 2; round++ {
		dr.Drop(t)
		var last error
		eventually.True(t, 15*time.Second, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			last = p.Ping(ctx)
			return last == nil
		}, func() string {
			return fmt.Sprintf("Ping to succeed after the broker dropped the connection, last error: %v", last)
		})
		for i, err := range Publish(t, p, event(typ, "k", 2*round), event(typ, "k", 2*round+1)) {
			if err != nil {
				t.Fatalf("round %d: Ping said healthy, yet event %d failed: %v", round, i, err)
			}
		}
	}
	if got := b.Received(t, typ, 5); len(got) != 5 {
		t.Fatalf("received %d messages, want 5", len(got))
	}
}

func unavailableThenRecovers(t *testing.T, d Driver) {
	b := d.NewBroker(t)
	o, ok := b.(Outage)
	if !ok {
		t.Skip("this broker cannot be taken away")
	}
	p := o.Open(t)
	typ := o.Destination(t)
	RequireDelivered(t, Publish(t, p, event(typ, "k", 0)))

	o.Stop(t)
	began := time.Now()
	errs := Publish(t, p, event(typ, "k", 1), event(typ, "k", 2))
	if took := time.Since(began); took > d.UnavailableWithin {
		t.Errorf("publishing to a broker that is gone took %s, want under %s", took, d.UnavailableWithin)
	}
	for i, err := range errs {
		if !publisher.IsUnavailable(err) {
			t.Fatalf("event %d while the broker is gone: %v, want unavailable", i, err)
		}
	}
	if err := p.Ping(context.Background()); err == nil {
		t.Error("Ping succeeded while the broker is gone")
	}

	o.Start(t)
	eventually.True(t, time.Minute, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return p.Ping(ctx) == nil
	}, func() string { return "Ping to succeed after the broker came back" })
	var errs2 []error
	eventually.True(t, time.Minute, func() bool {
		errs2 = Publish(t, p, event(typ, "k", 3))
		return errs2[0] == nil
	}, func() string {
		return fmt.Sprintf("a publish to succeed after the broker came back, last error %v", errs2[0])
	})
}

func closeIsIdempotent(t *testing.T, d Driver) {
	b := d.NewBroker(t)
	p := b.Open(t)
	if err := p.Ping(context.Background()); err != nil {
		t.Fatalf("Ping on a fresh publisher: %v", err)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	typ := b.Destination(t)
	errs := p.Publish(context.Background(), []outbox.Event{event(typ, "k", 0)})
	if errs[0] == nil {
		t.Fatal("Publish after Close succeeded")
	}
}

// HostileValues are texts that a broker's protocol or client library might
// alter on the way: trim, fold line breaks into spaces, drop control
// characters, replace bytes that are not UTF-8. The first three are issue
// 20's (on NATS they arrived as "spaced key", "line1  line2" and "padded").
// A driver must deliver each exactly as written or refuse it.
var HostileValues = []string{
	"  spaced key  ", "line1\r\nline2", "  padded  ", "padded\n", "a\rb", "\tleading tab", "trailing tab\t", " ", "",
	"inner  spaces", "nul\x00byte", "del\x7f", "\vvertical tab and form feed\f", "\u00a0no-break\u00a0",
	"é ü 日本", "\xff\xfenot UTF-8", "100%25 a%2Fb", "a: b; c=d, \"e\"",
}

// hostileHeader is the row header the hostile values travel in.
const hostileHeader = "note"

// valuesArriveAsWritten sends each hostile value as a partition key and as
// a row header's value, in one batch. Nothing may reach a consumer altered:
// each event is delivered and its value arrives byte for byte, or, where
// the driver's rule says its broker cannot carry the value, fails
// permanently with an error that names the field.
func valuesArriveAsWritten(t *testing.T, d Driver) {
	b := d.NewBroker(t)
	p := b.Open(t)
	typ := b.Destination(t)
	type sent struct{ field, value string }
	var batch []outbox.Event
	var what []sent
	for i, v := range HostileValues {
		if v != "" { // an empty key is a NULL key
			e := event(typ, v, i)
			e.Headers = nil
			batch, what = append(batch, e), append(what, sent{"partition_key", v})
		}
		if utf8.ValidString(v) { // headers come from JSON, which is UTF-8
			e := event(typ, "k", i)
			h, err := json.Marshal(map[string]string{hostileHeader: v})
			if err != nil {
				t.Fatal(err)
			}
			e.Headers = h
			batch, what = append(batch, e), append(what, sent{"header", v})
		}
	}
	errs := Publish(t, p, batch...)
	delivered := 0
	for i, err := range errs {
		refused := d.Refuses != nil && d.Refuses(what[i].field, what[i].value)
		name := fmt.Sprintf("%s %q", what[i].field, what[i].value)
		switch {
		case err == nil && refused:
			t.Errorf("%s was delivered; the driver's rule refuses it", name)
		case err == nil:
			delivered++
		case !refused:
			t.Errorf("%s: %v; want it delivered as written", name, err)
		case !publisher.IsPermanent(err) || publisher.IsUnavailable(err):
			t.Errorf("%s: %v; want a permanent error", name, err)
		case what[i].field == "header" && !strings.Contains(err.Error(), fmt.Sprintf("header %q", hostileHeader)),
			what[i].field == "partition_key" && !strings.Contains(err.Error(), "partition_key"):
			t.Errorf("%s: %q does not name the field", name, err)
		}
	}
	got := map[string]Message{}
	for _, m := range b.Received(t, typ, delivered) {
		got[m.ID] = m
	}
	for i, e := range batch {
		if errs[i] != nil {
			continue
		}
		m, ok := got[e.ID.String()]
		if !ok {
			t.Errorf("%s %q: delivered but did not arrive", what[i].field, what[i].value)
			continue
		}
		var arrived string
		if what[i].field == "partition_key" {
			arrived = m.Key
		} else if arrived, ok = m.Headers[hostileHeader]; !ok {
			t.Errorf("header %q: did not arrive", what[i].value)
			continue
		}
		if arrived != what[i].value {
			t.Errorf("%s %q arrived as %q", what[i].field, what[i].value, arrived)
		}
	}
}
