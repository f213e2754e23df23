// This file: an event as an AMQP message, and the limits checked before it is sent.

package amqp

import (
	"errors"
	"fmt"
	"strings"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/cloudevents"
)

// cePrefix starts the header of each CloudEvents attribute. The AMQP
// binding names application properties "cloudEvents:" or "cloudEvents_"
// and the attribute; RabbitMQ's headers table is what becomes application
// properties for AMQP 1.0 consumers, and ':' is what the CloudEvents SDKs
// for Go, .NET and Java read.
const cePrefix = "cloudEvents:"

// headerDeliveryCount is the header RabbitMQ's quorum queues write.
const headerDeliveryCount = "x-delivery-count"

// message builds the AMQP message for e, or says why it cannot exist.
// frameMax is the frame size negotiated on the connection it will go out
// on; 0 skips that check.
func (p *Publisher) message(e *outbox.Event, frameMax int) (amqp091.Publishing, error) {
	switch {
	case e.Type == "":
		return amqp091.Publishing{}, errors.New("invalid routing key: event_type is empty")
	case len(e.Type) > maxShortstr:
		return amqp091.Publishing{}, fmt.Errorf("invalid routing key: event_type is %d bytes; AMQP short strings (routing key, type) hold at most %d", len(e.Type), maxShortstr)
	}
	if limit := p.maxSize.Load(); int64(len(e.Payload)) > limit {
		return amqp091.Publishing{}, fmt.Errorf("message too large: %d bytes, max_message_size is %d", len(e.Payload), limit)
	}
	headers, err := outbox.ParseHeaders(e.Headers)
	if err != nil {
		return amqp091.Publishing{}, err
	}
	var attrs []cloudevents.Attribute
	if p.ce != nil {
		if attrs, err = p.ce.Attributes(e, headers); err != nil {
			return amqp091.Publishing{}, err
		}
	}
	table := make(amqp091.Table, len(headers)+len(attrs)+3)
	var contentType, contentTypeName string
	for k, v := range headers {
		if len(k) > maxShortstr {
			return amqp091.Publishing{}, fmt.Errorf("header %q: name is %d bytes; AMQP short strings (header names) hold at most %d", publisher.Clip(k), len(k), maxShortstr)
		}
		// RabbitMQ reads CC and BCC as extra routing keys and closes the
		// channel when they are not arrays.
		if k == "CC" || k == "BCC" {
			return amqp091.Publishing{}, fmt.Errorf("header %q: RabbitMQ reserves CC and BCC for sender-selected routing; rename it", k)
		}
		// Quorum queues set x-delivery-count (this exact name) on every
		// message they deliver, so the row's value would reach consumers
		// as the queue's count; which queues an exchange feeds is not the
		// relay's to know.
		if k == headerDeliveryCount {
			return amqp091.Publishing{}, fmt.Errorf("header %q: RabbitMQ quorum queues replace it with their own delivery count, so it cannot arrive as written; rename it", k)
		}
		// The driver's own headers win: two X-Event-ID headers in one
		// table would leave consumers guessing which is true.
		if outbox.IsEventHeader(k) || p.ce != nil && cloudevents.IsRelayAttribute(cePrefix, k) {
			continue
		}
		// The row's content type becomes the message property consumers
		// look at, and is not repeated as a header.
		if strings.EqualFold(k, "content-type") {
			// Two spellings would compete for the one property, and map
			// order would pick the winner.
			if contentTypeName != "" {
				return amqp091.Publishing{}, fmt.Errorf("headers %q and %q: both give the content_type property, which holds one value; keep one", min(contentTypeName, k), max(contentTypeName, k))
			}
			contentTypeName = k
			if len(v) > maxShortstr {
				return amqp091.Publishing{}, fmt.Errorf("header %q: content type is %d bytes; AMQP short strings (content_type) hold at most %d", k, len(v), maxShortstr)
			}
			contentType = v
			continue
		}
		table[k] = v
	}
	id := e.ID.String()
	if p.ce == nil {
		table[outbox.HeaderEventID] = id
		table[outbox.HeaderEventType] = e.Type
		if e.PartitionKey != "" {
			table[outbox.HeaderPartitionKey] = e.PartitionKey
		}
	}
	for _, a := range attrs {
		if a.Name == cloudevents.AttrDataContentType {
			continue // the content_type property carries it, as the binding says
		}
		// Strings, time included: an AMQP 0-9-1 timestamp holds whole
		// seconds, and the binding allows the canonical string form.
		table[cePrefix+a.Name] = a.Value
	}
	ts := e.CreatedAt
	if ts.IsZero() {
		ts = time.Now()
	}
	msg := amqp091.Publishing{
		Headers:      table,
		ContentType:  contentType,
		DeliveryMode: amqp091.Persistent,
		MessageId:    id,
		Type:         e.Type,
		Timestamp:    ts,
		Body:         e.Payload,
	}
	if size := headerFrameSize(&msg); frameMax > 0 && size > frameMax {
		return amqp091.Publishing{}, fmt.Errorf("properties and headers too large: the properties and headers are %d bytes as an AMQP content header frame, over the frame_max of %d bytes negotiated with RabbitMQ, which closes the connection over a larger frame (every header, the partition key and the event type count)",
			size, frameMax)
	}
	return msg, nil
}

// headerFrameSize is the size of the content header frame amqp091 writes
// for m, which must fit in one frame, unlike the body: the frame's header
// and end (8 bytes), class, weight, body size and property flags (14), then
// each property that is set. The driver's header tables hold strings only.
func headerFrameSize(m *amqp091.Publishing) int {
	shortstr := func(s string) int {
		if s == "" {
			return 0
		}
		return 1 + len(s)
	}
	n := 8 + 14
	n += shortstr(m.ContentType) + shortstr(m.ContentEncoding)
	if len(m.Headers) > 0 {
		n += 4 // the table's length
		for k, v := range m.Headers {
			s, _ := v.(string)
			n += 1 + len(k) + 1 + 4 + len(s) // shortstr name, 'S', longstr value
		}
	}
	if m.DeliveryMode > 0 {
		n++
	}
	if m.Priority > 0 {
		n++
	}
	n += shortstr(m.CorrelationId) + shortstr(m.ReplyTo) + shortstr(m.Expiration) + shortstr(m.MessageId)
	if !m.Timestamp.IsZero() {
		n += 8
	}
	n += shortstr(m.Type) + shortstr(m.UserId) + shortstr(m.AppId)
	return n
}
