// Package cetest decodes what a broker received in CloudEvents binary
// content mode with the official CloudEvents Go SDK, for the drivers'
// tests: HTTP requests through the SDK's own HTTP binding, and the other
// brokers' headers through the SDK's attribute tables and event builder
// (binding.ToEvent), with the prefix and content-type header of their
// binding. Every decoded event is validated as the SDK validates events.
package cetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/outbox-relay/relay/pkg/outbox"
)

// Binding says how a broker's headers carry the attributes.
type Binding struct {
	// Prefix goes before each attribute's name.
	Prefix string
	// ContentType names the header that carries datacontenttype; empty
	// means it is prefixed like the others.
	ContentType string
	// PercentEncoded says the values are percent-encoded (HTTP, NATS).
	PercentEncoded bool
}

// The bindings of the drivers that carry attributes as headers. For AMQP,
// pass the message's content-type property as the "content-type" header.
var (
	Kafka = Binding{Prefix: "ce_", ContentType: "content-type"}
	NATS  = Binding{Prefix: "ce-", PercentEncoded: true}
	AMQP  = Binding{Prefix: "cloudEvents:", ContentType: "content-type"}
	Redis = Binding{Prefix: "ce_"}
)

// HTTP decodes a request with the SDK's HTTP binding. The SDK does not
// undo the percent-encoding the binding prescribes, so the ce- values are
// decoded first.
func HTTP(h http.Header, body []byte) (*event.Event, error) {
	h = h.Clone()
	for k, vs := range h {
		if !strings.HasPrefix(k, "Ce-") {
			continue
		}
		for i, v := range vs {
			d, err := percentDecode(v)
			if err != nil {
				return nil, fmt.Errorf("header %s: %w", k, err)
			}
			vs[i] = d
		}
	}
	msg := cehttp.NewMessage(h, io.NopCloser(bytes.NewReader(body)))
	if msg.ReadEncoding() != binding.EncodingBinary {
		return nil, fmt.Errorf("not a binary-mode CloudEvent (encoding %s)", msg.ReadEncoding())
	}
	return toEvent(msg)
}

// JSON decodes an event in the CloudEvents JSON format (structured mode).
func JSON(line []byte) (*event.Event, error) {
	e := event.New()
	if err := format.JSON.Unmarshal(line, &e); err != nil {
		return nil, err
	}
	if err := e.Validate(); err != nil {
		return nil, fmt.Errorf("invalid CloudEvent: %w", err)
	}
	return &e, nil
}

// Headers decodes a message whose attributes travel as headers, as b
// says.
func Headers(b Binding, h map[string]string, body []byte) (*event.Event, error) {
	decoded := make(map[string]string, len(h))
	for k, v := range h {
		if b.PercentEncoded && strings.HasPrefix(k, b.Prefix) {
			d, err := percentDecode(v)
			if err != nil {
				return nil, fmt.Errorf("header %s: %w", k, err)
			}
			v = d
		}
		decoded[k] = v
	}
	specs := spec.WithPrefix(b.Prefix)
	version := specs.Version(decoded[specs.PrefixedSpecVersionName()])
	if version == nil {
		return nil, fmt.Errorf("no %s header with a known spec version", specs.PrefixedSpecVersionName())
	}
	return toEvent(&headerMessage{b: b, h: decoded, body: body, version: version})
}

func toEvent(m binding.MessageReader) (*event.Event, error) {
	e, err := binding.ToEvent(context.Background(), m)
	if err != nil {
		return nil, err
	}
	if err := e.Validate(); err != nil {
		return nil, fmt.Errorf("invalid CloudEvent: %w", err)
	}
	return e, nil
}

// headerMessage is a binary-mode message made of headers and a body.
type headerMessage struct {
	b       Binding
	h       map[string]string
	body    []byte
	version spec.Version
}

func (m *headerMessage) ReadEncoding() binding.Encoding { return binding.EncodingBinary }

func (m *headerMessage) ReadStructured(context.Context, binding.StructuredWriter) error {
	return binding.ErrNotStructured
}

func (m *headerMessage) ReadBinary(_ context.Context, w binding.BinaryWriter) error {
	for k, v := range m.h {
		var err error
		switch {
		case m.b.ContentType != "" && strings.EqualFold(k, m.b.ContentType):
			err = w.SetAttribute(m.version.AttributeFromKind(spec.DataContentType), v)
		case m.version.Attribute(k) != nil:
			err = w.SetAttribute(m.version.Attribute(k), v)
		case strings.HasPrefix(k, m.b.Prefix):
			err = w.SetExtension(strings.ToLower(k[len(m.b.Prefix):]), v)
		}
		if err != nil {
			return fmt.Errorf("header %s: %w", k, err)
		}
	}
	if len(m.body) > 0 {
		return w.SetData(bytes.NewReader(m.body))
	}
	return nil
}

func (m *headerMessage) Finish(error) error { return nil }

func (m *headerMessage) GetAttribute(k spec.Kind) (spec.Attribute, any) {
	attr := m.version.AttributeFromKind(k)
	if attr == nil {
		return nil, nil
	}
	name := attr.PrefixedName()
	if k == spec.DataContentType && m.b.ContentType != "" {
		name = m.b.ContentType
	}
	if v, ok := m.h[name]; ok {
		return attr, v
	}
	return attr, nil
}

func (m *headerMessage) GetExtension(name string) any {
	if v, ok := m.h[m.b.Prefix+name]; ok {
		return v
	}
	return nil
}

// percentDecode undoes the bindings' percent-encoding, refusing what does
// not decode to UTF-8.
func percentDecode(v string) (string, error) {
	if strings.HasPrefix(v, `"`) {
		return "", errors.New("quoted value: the relay never quotes")
	}
	d, err := url.PathUnescape(v)
	if err != nil {
		return "", err
	}
	if !utf8.ValidString(d) {
		return "", errors.New("percent-encoded bytes are not UTF-8")
	}
	return d, nil
}

// Want is what a decoded event must hold besides what the outbox event
// gives (id, type, time, partitionkey, data).
type Want struct {
	Source          string
	DataContentType string // "" when the event must have none
	Traceparent     string // "" when the event must have none
}

// Check compares a decoded event with the outbox event it came from.
func Check(t testing.TB, got *event.Event, e outbox.Event, want Want) {
	t.Helper()
	if got.SpecVersion() != "1.0" {
		t.Errorf("specversion %q, want 1.0", got.SpecVersion())
	}
	if got.ID() != e.ID.String() {
		t.Errorf("id %q, want %s", got.ID(), e.ID)
	}
	if got.Type() != e.Type {
		t.Errorf("type %q, want %q", got.Type(), e.Type)
	}
	if got.Source() != want.Source {
		t.Errorf("source %q, want %q", got.Source(), want.Source)
	}
	if !got.Time().Equal(e.CreatedAt) {
		t.Errorf("time %s, want %s", got.Time().Format(time.RFC3339Nano), e.CreatedAt.Format(time.RFC3339Nano))
	}
	if got.DataContentType() != want.DataContentType {
		t.Errorf("datacontenttype %q, want %q", got.DataContentType(), want.DataContentType)
	}
	ext := got.Extensions()
	if pk, _ := ext["partitionkey"].(string); pk != e.PartitionKey {
		t.Errorf("partitionkey %q, want %q", pk, e.PartitionKey)
	}
	if tp, _ := ext["traceparent"].(string); tp != want.Traceparent {
		t.Errorf("traceparent %q, want %q", tp, want.Traceparent)
	}
	if !bytes.Equal(got.Data(), e.Payload) {
		t.Errorf("data %q, want the payload %q", got.Data(), e.Payload)
	}
}
