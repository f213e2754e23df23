package stdout_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/internal/harness/cetest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/cloudevents"
	"github.com/outbox-relay/relay/pkg/publisher/publishertest"
	"github.com/outbox-relay/relay/pkg/publisher/stdout"
)

func TestWritesOneJSONLinePerEvent(t *testing.T) {
	var buf bytes.Buffer
	p := stdout.New(&buf)
	batch := []outbox.Event{
		{ID: uuid.New(), Type: "a.json", PartitionKey: "k1", Payload: []byte(`{"x":1}`), Headers: []byte(`{"h":"v","n":2}`)},
		{ID: uuid.New(), Type: "a.text", Payload: []byte("plain text")},
		{ID: uuid.New(), Type: "a.binary", Payload: []byte{0xff, 0x00, 0x10}},
		{ID: uuid.New(), Type: "a.bad", Payload: []byte(`{}`), Headers: []byte(`[1,2]`)},
	}
	errs := p.Publish(context.Background(), batch)
	for i, err := range errs[:3] {
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
	}
	if !publisher.IsPermanent(errs[3]) {
		t.Fatalf("bad headers: err = %v, want permanent", errs[3])
	}

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("wrote %d lines, want 3:\n%s", len(lines), buf.String())
	}
	var got []map[string]any
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q is not JSON: %v", l, err)
		}
		got = append(got, m)
	}
	if got[0]["event_id"] != batch[0].ID.String() || got[0]["partition_key"] != "k1" {
		t.Errorf("line 0 = %v", got[0])
	}
	if h := got[0]["headers"].(map[string]any); h["h"] != "v" || h["n"] != "2" {
		t.Errorf("headers = %v, want strings", h)
	}
	if p := got[0]["payload"].(map[string]any); p["x"] != 1.0 {
		t.Errorf("JSON payload not embedded: %v", got[0]["payload"])
	}
	if got[1]["payload_text"] != "plain text" {
		t.Errorf("text payload = %v", got[1])
	}
	if got[2]["payload_base64"] != "/wAQ" {
		t.Errorf("binary payload = %v", got[2])
	}
}

func TestCloseIsIdempotentAndStopsPublishing(t *testing.T) {
	var buf bytes.Buffer
	p := stdout.New(&buf)
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	errs := p.Publish(context.Background(), []outbox.Event{{ID: uuid.New(), Type: "x"}})
	if !publisher.IsUnavailable(errs[0]) {
		t.Fatalf("publish after Close: %v, want unavailable", errs[0])
	}
	if p.Ping(context.Background()) == nil {
		t.Fatal("Ping after Close succeeded")
	}
}

// brokenPipe is a stdout whose reader has gone away.
type brokenPipe struct{}

func (brokenPipe) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

// TestFailedFlushKeepsPermanentErrors checks that a write failure, which
// says nothing about any one event, does not turn an event that can never be
// written into one that is released and tried again forever.
func TestFailedFlushKeepsPermanentErrors(t *testing.T) {
	t.Parallel()
	p := stdout.New(brokenPipe{})
	batch := []outbox.Event{
		{ID: uuid.New(), Type: "a.ok", Payload: []byte(`{}`)},
		{ID: uuid.New(), Type: "a.bad", Payload: []byte(`{}`), Headers: []byte(`[1,2]`)},
		{ID: uuid.New(), Type: "a.ok", Payload: []byte(`{}`)},
	}
	errs := p.Publish(context.Background(), batch)
	if !publisher.IsPermanent(errs[1]) || publisher.IsUnavailable(errs[1]) {
		t.Errorf("bad headers: err = %v, want permanent", errs[1])
	}
	for _, i := range []int{0, 2} {
		if !publisher.IsUnavailable(errs[i]) || !strings.Contains(errs[i].Error(), "broken pipe") {
			t.Errorf("event %d: err = %v, want unavailable with the write error", i, errs[i])
		}
	}
}

func TestCloudEventsJSONLines(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	m := cloudevents.Config{Enabled: true}.Mapper(publisher.WithTable(context.Background(), "outbox"))
	p := stdout.NewCloudEvents(&buf, m)
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	now := time.Date(2026, 11, 23, 4, 5, 6, 0, time.UTC)
	batch := []outbox.Event{
		{ID: uuid.New(), Type: "a.json", PartitionKey: "k1", Payload: []byte(`{"x":1}`), CreatedAt: now,
			Headers: []byte(`{"Content-Type":"application/json","traceparent":"` + tp + `","h":"dropped"}`)},
		{ID: uuid.New(), Type: "a.untyped", Payload: []byte(`[1,2]`), CreatedAt: now},
		{ID: uuid.New(), Type: "a.text", Payload: []byte("plain text"), CreatedAt: now, Headers: []byte(`{"content-type":"text/plain"}`)},
		{ID: uuid.New(), Type: "a.binary", Payload: []byte{0xff, 0x00, 0x10}, CreatedAt: now},
		{ID: uuid.New(), Type: "a.json-typed-but-not-json", Payload: []byte("{"), CreatedAt: now, Headers: []byte(`{"content-type":"application/json"}`)},
	}
	publishertest.RequireDelivered(t, p.Publish(context.Background(), batch))

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != len(batch) {
		t.Fatalf("wrote %d lines, want %d:\n%s", len(lines), len(batch), buf.String())
	}
	wantType := []string{"application/json", "", "text/plain", "", "application/json"}
	wantTP := []string{tp, "", "", "", ""}
	for i, l := range lines {
		got, err := cetest.JSON([]byte(l))
		if err != nil {
			t.Fatalf("line %d %s: the SDK cannot decode it: %v", i, l, err)
		}
		cetest.Check(t, got, batch[i], cetest.Want{Source: "/outbox", DataContentType: wantType[i], Traceparent: wantTP[i]})
	}
	if !strings.Contains(lines[0], `"data":{"x":1}`) || !strings.Contains(lines[2], `"data_base64":`) || strings.Contains(lines[0], "dropped") {
		t.Errorf("JSON payload embedded, text in base64, other headers left out:\n%s", buf.String())
	}
}

func TestCloudEventsOptions(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ url, want string }{
		{"stdout://?format=xml", `format="xml" is not one of relay`},
		{"stdout://?topic=x", `unknown option "topic" (known: format, ce_source)`},
		{"stdout://?ce_source=/x", "needs format=cloudevents"},
	} {
		if _, err := publisher.Open(context.Background(), tt.url); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error containing %q", tt.url, err, tt.want)
		}
	}
	p, err := publisher.Open(context.Background(), "stdout://?format=cloudevents&ce_source=/x")
	if err != nil {
		t.Fatal(err)
	}
	_ = p.Close(context.Background())
}

// TestTextThatIsNotUTF8GoesDead: a JSON string holds only UTF-8, and
// encoding/json writes U+FFFD for any other byte, so an event_type or
// partition_key that is not UTF-8 would be written as another one. Those
// events go DEAD naming the field; odd but valid text is written as is.
func TestTextThatIsNotUTF8GoesDead(t *testing.T) {
	var buf bytes.Buffer
	p := stdout.New(&buf)
	batch := []outbox.Event{
		{ID: uuid.New(), Type: "a", PartitionKey: "k\xff"},
		{ID: uuid.New(), Type: "a\xfe", PartitionKey: "k"},
		{ID: uuid.New(), Type: "a", PartitionKey: "  k\r\n\x00<&>\u2028"},
	}
	errs := p.Publish(context.Background(), batch)
	for i, want := range []string{`partition_key "k\xff" is not valid UTF-8`, `event_type "a\xfe" is not valid UTF-8`} {
		if !publisher.IsPermanent(errs[i]) || !strings.Contains(errs[i].Error(), want) {
			t.Errorf("event %d: %v, want a permanent error saying %s", i, errs[i], want)
		}
	}
	if errs[2] != nil {
		t.Fatalf("valid UTF-8 key: %v", errs[2])
	}
	var l struct {
		PartitionKey string `json:"partition_key"`
	}
	if err := json.Unmarshal(buf.Bytes(), &l); err != nil || l.PartitionKey != batch[2].PartitionKey {
		t.Errorf("line %q: key %q (%v), want %q", buf.Bytes(), l.PartitionKey, err, batch[2].PartitionKey)
	}
}
