package amqp

import (
	"context"
	"errors"
	"fmt"
	"strings"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/relay/pkg/publisher"
)

var _ publisher.Provisioner = (*Publisher)(nil)

// Provision declares the URL's exchange (durable, exchange_type) where it is
// missing and, when p.Name names a queue, declares that queue (durable) and
// binds it to the exchange for every event type: a topic exchange routes
// orders.> as orders.#. Without a queue, RabbitMQ has nowhere to put an
// event and returns it, and the relay marks it failed. On the default
// exchange, which routes by queue name, each event type gets a queue of its
// own name instead.
func (p *Publisher) Provision(ctx context.Context, pp publisher.ProvisionParams) ([]publisher.Provisioned, error) {
	if len(pp.EventTypes) == 0 {
		return nil, errors.New("amqp: name the event types to route (orders.paid, or orders.> for every type under orders.)")
	}
	conn, err := p.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	var out []publisher.Provisioned
	err = p.answerWithin(conn, "provision", func() error {
		if p.cfg.Exchange == "" {
			for _, t := range pp.EventTypes {
				if _, ok := publisher.IsPrefixPattern(t); ok {
					return fmt.Errorf("amqp: the default exchange routes each event type to the queue of its name; name the types (not %q), or set exchange= in the URL", t)
				}
				q, err := p.declareQueue(conn, t)
				if err != nil {
					return err
				}
				out = append(out, q)
			}
			return nil
		}
		ex, err := p.declareExchange(conn)
		if err != nil {
			return err
		}
		if pp.Name == "" {
			// Said because the exchange alone keeps nothing: RabbitMQ
			// returns what no queue is bound for, and the event fails.
			ex.Detail += "; no queue named, so only queues already bound receive events"
			out = append(out, ex)
			return nil
		}
		out = append(out, ex)
		q, err := p.declareQueue(conn, pp.Name)
		if err != nil {
			return err
		}
		ch, err := conn.Channel()
		if err != nil {
			return fmt.Errorf("amqp: open channel: %w", err)
		}
		defer func() { _ = ch.Close() }()
		var keys []string
		for _, t := range pp.EventTypes {
			key := t
			if prefix, ok := publisher.IsPrefixPattern(t); ok && p.cfg.ExchangeType == "topic" {
				key = prefix + "#"
			}
			if err := ch.QueueBind(pp.Name, key, p.cfg.Exchange, false, nil); err != nil {
				return fmt.Errorf("amqp: bind queue %q to exchange %q with %q: %w", pp.Name, p.cfg.Exchange, key, err)
			}
			keys = append(keys, key)
		}
		q.Detail = "bound to exchange " + p.cfg.Exchange + " with " + strings.Join(keys, " ") + ", " + q.Detail
		out = append(out, q)
		return nil
	})
	return out, err
}

// declareExchange declares the URL's exchange unless it exists. A passive
// declare of a missing exchange closes its channel, so each step has one.
func (p *Publisher) declareExchange(conn *amqp091.Connection) (publisher.Provisioned, error) {
	ex := publisher.Provisioned{Kind: "exchange", Name: p.cfg.Exchange, Action: publisher.Exists}
	ch, err := conn.Channel()
	if err != nil {
		return ex, fmt.Errorf("amqp: open channel: %w", err)
	}
	err = ch.ExchangeDeclarePassive(p.cfg.Exchange, p.cfg.ExchangeType, true, false, false, false, nil)
	var amqpErr *amqp091.Error
	if errors.As(err, &amqpErr) && amqpErr.Code == amqp091.NotFound {
		if ch, err = conn.Channel(); err != nil {
			return ex, fmt.Errorf("amqp: open channel: %w", err)
		}
		if err = ch.ExchangeDeclare(p.cfg.Exchange, p.cfg.ExchangeType, true, false, false, false, nil); err != nil {
			return ex, fmt.Errorf("amqp: declare exchange %q (type %s, durable): %w", p.cfg.Exchange, p.cfg.ExchangeType, err)
		}
		ex.Action = publisher.Created
	} else if err != nil {
		return ex, fmt.Errorf("amqp: check exchange %q: %w", p.cfg.Exchange, err)
	}
	_ = ch.Close()
	ex.Detail = fmt.Sprintf("type %s in vhost %q", p.cfg.ExchangeType, p.cfg.Vhost)
	return ex, nil
}

// declareQueue declares a durable queue unless it exists, and says how many
// messages it holds.
func (p *Publisher) declareQueue(conn *amqp091.Connection, name string) (publisher.Provisioned, error) {
	q := publisher.Provisioned{Kind: "queue", Name: name, Action: publisher.Exists}
	ch, err := conn.Channel()
	if err != nil {
		return q, fmt.Errorf("amqp: open channel: %w", err)
	}
	state, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
	var amqpErr *amqp091.Error
	if errors.As(err, &amqpErr) && amqpErr.Code == amqp091.NotFound {
		if ch, err = conn.Channel(); err != nil {
			return q, fmt.Errorf("amqp: open channel: %w", err)
		}
		if state, err = ch.QueueDeclare(name, true, false, false, false, nil); err != nil {
			return q, fmt.Errorf("amqp: declare queue %q (durable): %w", name, err)
		}
		q.Action = publisher.Created
	} else if err != nil {
		return q, fmt.Errorf("amqp: check queue %q: %w", name, err)
	}
	_ = ch.Close()
	if state.Messages == 1 {
		q.Detail = "1 message"
	} else {
		q.Detail = fmt.Sprintf("%d messages", state.Messages)
	}
	return q, nil
}
