// This file: what a confirm, a return or a closed channel means for the event.

package amqp

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
)

// result classifies one confirmed (acked or nacked) publish.
func (p *Publisher) result(s *session, e *outbox.Event, dc *amqp091.DeferredConfirmation) error {
	if dc.Acked() {
		if r, ok := s.takeReturn(e.ID.String()); ok {
			return publisher.Permanent(fmt.Errorf("no queue is bound to exchange %q for routing key %q: RabbitMQ returned the message (%d %s); bind a queue or fix the event type",
				r.Exchange, r.RoutingKey, r.ReplyCode, r.ReplyText))
		}
		return nil
	}
	// amqp091 nacks every pending confirm when the channel closes, after
	// marking it closed.
	if s.ch.IsClosed() {
		<-s.gone
		return p.channelClosed(s.closeErr, e)
	}
	return fmt.Errorf("amqp: RabbitMQ refused the message (basic.nack), for example a queue at its max-length with overflow=reject-publish")
}

// tooLarge is RabbitMQ's refusal of a message over max_message_size.
var tooLarge = regexp.MustCompile(`message size (\d+) is larger than configured max size (\d+)`)

// channelClosed classifies an event whose channel closed before it was
// confirmed. The channel is shared, so the reason may be another event's:
// only a refusal that names this event's size is held against it.
func (p *Publisher) channelClosed(reason *amqp091.Error, e *outbox.Event) error {
	if reason == nil {
		return publisher.Dropped(errors.New("amqp: connection closed before RabbitMQ confirmed the message"))
	}
	if m := tooLarge.FindStringSubmatch(reason.Reason); m != nil && reason.Code == amqp091.PreconditionFailed {
		if limit, err := strconv.ParseInt(m[2], 10, 64); err == nil {
			p.learnMaxSize(limit)
			if int64(len(e.Payload)) > limit {
				return publisher.Permanent(fmt.Errorf("message too large: %d bytes, RabbitMQ's max_message_size is %d: %w", len(e.Payload), limit, reason))
			}
			// The culprit is known and now refused before sending.
			return publisher.Dropped(fmt.Errorf("amqp: channel closed by another event of the batch: %w", reason))
		}
	}
	switch {
	case reason.Code == amqp091.NotFound && strings.Contains(reason.Reason, "no exchange"):
		// Not the event's fault: every event goes to this exchange. The
		// relay pauses, and Ping fails until the exchange exists.
		return publisher.Unavailable(p.missingExchange(reason))
	case reason.Code == amqp091.AccessRefused:
		// Permissions, or an internal exchange: configuration, the same for
		// every event, so the relay pauses and tries again with backoff.
		return publisher.Unavailable(fmt.Errorf("amqp: RabbitMQ refused to take messages for exchange %q: %w", p.cfg.Exchange, reason))
	case reason.Server && reason.Recoverable():
		// Some other refusal of a message, which names no event: the
		// engine sends the batch again in halves until the event that
		// causes it stands alone and pays with an attempt.
		return publisher.Dropped(fmt.Errorf("amqp: RabbitMQ closed the channel before confirming the message: %w", reason))
	}
	return publisher.Dropped(fmt.Errorf("amqp: connection lost: %w", reason))
}

func (p *Publisher) learnMaxSize(limit int64) {
	for {
		cur := p.maxSize.Load()
		if limit >= cur || p.maxSize.CompareAndSwap(cur, limit) {
			return
		}
	}
}
