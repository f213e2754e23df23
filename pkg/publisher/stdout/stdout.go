// Package stdout is a publisher that writes each event as one JSON line, for
// trying the relay out and for piping events into other tools. With
// format=cloudevents each line is the event in the CloudEvents JSON format
// (structured mode: stdout has no headers to carry attributes). It serves
// stdout:// URLs and is the relay's default publisher.
package stdout

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/cloudevents"
	"github.com/outbox-relay/relay/pkg/publisher/option"
)

func init() {
	publisher.Register(func(ctx context.Context, u *url.URL) (publisher.Publisher, error) {
		if u.Host != "" || (u.Path != "" && u.Path != "/") {
			return nil, fmt.Errorf("stdout:// takes no host or path, got %q", u.Redacted())
		}
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			return nil, fmt.Errorf("stdout URL: options: %w", err)
		}
		v, err := Options.Parse(q)
		if err != nil {
			return nil, err
		}
		p := New(os.Stdout)
		p.ce = optCloudEvents.Get(v).Mapper(ctx)
		return p, nil
	}, "stdout")
	publisher.RegisterOptions(Options, "stdout")
}

// Options are the driver's URL options: format and ce_source only, which
// docs/brokers.md describes in words rather than a table.
var Options = option.New("stdout")

var optCloudEvents = cloudevents.Declare(Options,
	"`format=cloudevents` writes each event as one line in the CloudEvents JSON format (structured mode).")

// Publisher writes JSON lines to a writer.
type Publisher struct {
	mu     sync.Mutex
	w      *bufio.Writer
	closed bool
	// ce writes CloudEvents JSON lines when set.
	ce *cloudevents.Mapper
}

// New returns a Publisher writing to w.
func New(w io.Writer) *Publisher {
	return &Publisher{w: bufio.NewWriter(w)}
}

// NewCloudEvents returns a Publisher writing each event to w as a line in
// the CloudEvents JSON format, with the attributes m gives.
func NewCloudEvents(w io.Writer, m *cloudevents.Mapper) *Publisher {
	return &Publisher{w: bufio.NewWriter(w), ce: m}
}

// line is one event as written. The payload is embedded as JSON when it is
// JSON, as a string when it is other UTF-8 text, and base64 otherwise.
type line struct {
	EventID       string            `json:"event_id"`
	EventType     string            `json:"event_type"`
	PartitionKey  string            `json:"partition_key,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`
	Payload       json.RawMessage   `json:"payload,omitempty"`
	PayloadText   *string           `json:"payload_text,omitempty"`
	PayloadBase64 []byte            `json:"payload_base64,omitempty"`
}

// Publish writes the batch and flushes it; an event whose headers are not a
// JSON object of scalars fails permanently.
func (p *Publisher) Publish(_ context.Context, batch []outbox.Event) []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	errs := make([]error, len(batch))
	if p.closed {
		return publisher.Fill(len(batch), publisher.Unavailable(fmt.Errorf("stdout publisher is closed")))
	}
	enc := json.NewEncoder(p.w)
	for i, e := range batch {
		headers, err := outbox.ParseHeaders(e.Headers)
		if err != nil {
			errs[i] = publisher.Permanent(err)
			continue
		}
		if p.ce != nil {
			l, err := p.ceLine(&e, headers)
			if err != nil {
				errs[i] = publisher.Permanent(err)
				continue
			}
			if err := enc.Encode(l); err != nil {
				errs[i] = publisher.Unavailable(fmt.Errorf("write to stdout: %w", err))
			}
			continue
		}
		if err := checkText(&e); err != nil {
			errs[i] = publisher.Permanent(err)
			continue
		}
		// The line's own fields name the event; a row header claiming to
		// is left out, as every driver does.
		maps.DeleteFunc(headers, func(k, _ string) bool { return outbox.IsEventHeader(k) })
		l := line{EventID: e.ID.String(), EventType: e.Type, PartitionKey: e.PartitionKey, Headers: headers}
		switch {
		case json.Valid(e.Payload):
			l.Payload = e.Payload
		case utf8.Valid(e.Payload):
			text := string(e.Payload)
			l.PayloadText = &text
		default:
			l.PayloadBase64 = e.Payload
		}
		if err := enc.Encode(l); err != nil {
			errs[i] = publisher.Unavailable(fmt.Errorf("write to stdout: %w", err))
		}
	}
	if err := p.w.Flush(); err != nil {
		// Nothing written is known to have arrived. Events that failed
		// permanently keep that verdict: writing them again cannot help.
		unavailable := publisher.Unavailable(fmt.Errorf("write to stdout: %w", err))
		for i := range errs {
			if errs[i] == nil {
				errs[i] = unavailable
			}
		}
	}
	return errs
}

// checkText refuses an event_type or partition_key that is not UTF-8: a
// JSON string cannot hold such bytes, and encoding/json would write U+FFFD
// in their place, so the line would name another key. (Header values come
// from the row's JSON and are UTF-8 already.)
func checkText(e *outbox.Event) error {
	if !utf8.ValidString(e.Type) {
		return fmt.Errorf("event_type %q is not valid UTF-8, which a JSON line cannot carry as written", publisher.Clip(e.Type))
	}
	if !utf8.ValidString(e.PartitionKey) {
		return fmt.Errorf("partition_key %q is not valid UTF-8, which a JSON line cannot carry as written", publisher.Clip(e.PartitionKey))
	}
	return nil
}

// ceLine is an event in the CloudEvents JSON format: its attributes as
// members, the payload as data when it is JSON of a JSON content type (or
// of none, which the format reads as JSON), base64 in data_base64
// otherwise. The row's other headers have no place in it.
func (p *Publisher) ceLine(e *outbox.Event, headers map[string]string) (map[string]any, error) {
	attrs, err := p.ce.Attributes(e, headers)
	if err != nil {
		return nil, err
	}
	l := make(map[string]any, len(attrs)+1)
	contentType := ""
	for _, a := range attrs {
		l[a.Name] = a.Value
		if a.Name == cloudevents.AttrDataContentType {
			contentType = a.Value
		}
	}
	switch {
	case len(e.Payload) == 0:
	case json.Valid(e.Payload) && jsonType(contentType):
		l["data"] = json.RawMessage(e.Payload)
	default:
		l["data_base64"] = e.Payload // encoding/json writes []byte as base64
	}
	return l, nil
}

// jsonType reports whether a content type is JSON (application/json or a
// +json suffix, parameters aside) or absent.
func jsonType(ct string) bool {
	if ct == "" {
		return true
	}
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	return mt == "application/json" || mt == "text/json" || strings.HasSuffix(mt, "+json")
}

// Ping succeeds while the publisher is open.
func (p *Publisher) Ping(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("stdout publisher is closed")
	}
	return nil
}

// Close flushes what is buffered.
func (p *Publisher) Close(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	return p.w.Flush()
}
