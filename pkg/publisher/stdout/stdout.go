// Package stdout is a publisher that writes each event as one JSON line, for
// trying the relay out and for piping events into other tools. It serves
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
	"sync"
	"unicode/utf8"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
)

func init() {
	publisher.Register(func(_ context.Context, u *url.URL) (publisher.Publisher, error) {
		if u.Host != "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			return nil, fmt.Errorf("stdout:// takes no host, path or options, got %q", u.Redacted())
		}
		return New(os.Stdout), nil
	}, "stdout")
}

// Publisher writes JSON lines to a writer.
type Publisher struct {
	mu     sync.Mutex
	w      *bufio.Writer
	closed bool
}

// New returns a Publisher writing to w.
func New(w io.Writer) *Publisher {
	return &Publisher{w: bufio.NewWriter(w)}
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
