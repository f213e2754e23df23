package nats

import (
	"fmt"
	"net/textproto"
	"strings"

	natsgo "github.com/nats-io/nats.go"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
)

// The limits NATS enforces on a message, checked before it is sent. A
// message over the server's protocol limits is not refused: the server
// closes the connection, failing every publish on it. A message over a
// JetStream limit is refused, but only after a round trip.
const (
	// controlLineReserve is the room a publish's protocol line needs
	// besides the subject: "HPUB <subject> <reply> <header size> <total
	// size>", where the reply subject of an asynchronous JetStream publish
	// is "_INBOX.xxxxxx.yyyyyy" (20 bytes) and the sizes are at most 5 and
	// 8 digits (headers are capped at 64 KiB, max_payload at 64 MiB). 64
	// leaves a margin over the 36 bytes that makes.
	controlLineReserve = 64
	// maxHeaderBytes is JetStream's limit on a message's encoded header
	// block (math.MaxUint16): it answers "header size exceeds maximum
	// allowed of 64k" to anything larger.
	maxHeaderBytes = 65535
	// headerForbidden are the printable ASCII characters nats.go refuses
	// in a header name, failing the publish with "message could not
	// decode headers".
	headerForbidden = `"()/,:;<=>?@[\]{}`
)

// maxSubjectLen is the longest subject the server reads without closing
// the connection over its max_control_line.
func (p *Publisher) maxSubjectLen() int { return p.cfg.MaxControlLine - controlLineReserve }

// checkSubject accepts what a JetStream publish can go to: dot-separated
// non-empty tokens, no wildcards, no white space, and short enough for the
// server's control line.
func (p *Publisher) checkSubject(e *outbox.Event, subject string) error {
	if limit := p.maxSubjectLen(); len(subject) > limit {
		what := fmt.Sprintf("event_type is %d bytes", len(e.Type))
		if p.cfg.SubjectPrefix != "" {
			what = fmt.Sprintf("subject_prefix + event_type is %d bytes", len(subject))
		}
		return fmt.Errorf("invalid subject %q: %s; NATS subjects may be at most %d bytes to fit the server's %d-byte protocol line (max_control_line) with the reply subject and sizes",
			publisher.Clip(subject), what, limit, p.cfg.MaxControlLine)
	}
	if subject == "" {
		return fmt.Errorf("invalid subject: event_type is empty")
	}
	// Token by token without strings.Split, which would allocate for
	// every event.
	for rest := subject; ; {
		tok, after, more := strings.Cut(rest, ".")
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n\x00") {
			return fmt.Errorf("invalid subject %q: NATS subjects are dot-separated tokens without wildcards or white space", subject)
		}
		if !more {
			return nil
		}
		rest = after
	}
}

// validHeader applies nats.go's rule for header names (printable ASCII
// without headerForbidden) and refuses values nats.go would alter: a line
// break it would turn into a space, white space around the value it would
// trim (publisher.CheckHeaderLine).
func validHeader(k, v string) error {
	if k == "" {
		return fmt.Errorf(`header "": invalid NATS header name: a name cannot be empty`)
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; c <= ' ' || c > '~' || strings.IndexByte(headerForbidden, c) >= 0 {
			return fmt.Errorf("header %q: invalid NATS header name: names must be printable ASCII without spaces or any of %s", publisher.Clip(k), headerForbidden)
		}
	}
	if err := publisher.CheckHeaderLine(v); err != nil {
		return fmt.Errorf("header %q: %w", k, err)
	}
	return nil
}

// checkPartitionKey refuses a partition key that the X-Partition-Key header
// would carry altered: NATS has no other place for it. CloudEvents mode
// percent-encodes it instead.
func checkPartitionKey(key string) error {
	if err := publisher.CheckHeaderLine(key); err != nil {
		return fmt.Errorf("partition_key %q cannot travel in the %s header: %w", publisher.Clip(key), outbox.HeaderPartitionKey, err)
	}
	return nil
}

// headerSize is the size of h as nats.go encodes it: a "NATS/1.0" line, a
// "name: value" line per value (values trimmed), and an empty line.
func headerSize(h natsgo.Header) int {
	n := len("NATS/1.0\r\n") + len("\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(": ") + len(textproto.TrimString(v)) + len("\r\n")
		}
	}
	return n
}

// checkSize applies JetStream's header limit and the server's max_payload
// (from its INFO; 0 before the first connection, when nats.go checks it
// itself) to a message's headers and payload.
func checkSize(maxPayload int64, headers, payload int) error {
	if headers > maxHeaderBytes {
		return fmt.Errorf("headers too large: the headers are %d bytes as NATS encodes them (the row's headers with Nats-Msg-Id and the event's X-Event-* or ce- headers); JetStream stores at most %d bytes of headers per message",
			headers, maxHeaderBytes)
	}
	if total := int64(headers) + int64(payload); maxPayload > 0 && total > maxPayload {
		return fmt.Errorf("message too large: %d bytes (payload %d, headers %d); the NATS server's max_payload is %d bytes",
			total, payload, headers, maxPayload)
	}
	return nil
}
