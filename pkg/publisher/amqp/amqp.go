// Package amqp publishes events to RabbitMQ over AMQP 0-9-1. Every event goes
// to one exchange with its event type as the routing key, as a persistent
// message whose message_id is the event id. Publisher confirms are always on
// and pipelined: the whole batch is written, then the confirms are awaited,
// so a batch costs about one round trip. Messages are mandatory, so an event
// that no queue is bound for comes back and goes DEAD instead of vanishing.
//
// The driver connects lazily and reconnects on the next Publish or Ping after
// the connection or channel is lost; it runs no background reconnect loop.
// Register it by importing the package; it serves amqp:// and amqps:// URLs.
package amqp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/cloudevents"
)

func init() {
	publisher.RegisterConfig(ParseURL, Open, "amqp", "amqps")
	publisher.RegisterOptions(Options, "amqp", "amqps")
	// What people call the broker, for the unknown scheme's did-you-mean.
	publisher.Alias("rabbitmq", "amqp")
	publisher.Alias("rabbit", "amqp")
}

// errClosed is what a closed publisher answers.
var errClosed = errors.New("amqp: publisher is closed")

// Publisher publishes to a RabbitMQ exchange over one connection and one
// confirm-mode channel, shared by concurrent Publish calls.
type Publisher struct {
	cfg     Config
	tls     *tls.Config // nil without TLS
	dialURL string      // scheme://host:port: credentials go through SASL, never a URL
	// maxSize starts at MaxMessageSize and drops to the server's
	// max_message_size once a refusal reveals it, so later oversized events
	// are refused here instead of closing the channel under their batch.
	maxSize atomic.Int64
	// ce maps events to CloudEvents attributes; nil sends X-Event-*.
	ce *cloudevents.Mapper

	mu       sync.Mutex // guards the fields below; held while dialling
	sess     *session
	closed   bool
	lastDial time.Time
	dialErr  error
	watchers sync.WaitGroup // session watch goroutines, awaited by Close
}

// Open prepares a publisher. It does not connect: the first Publish or Ping
// does, so a broker that is down is not an error here. Only a bad TLS file
// is.
func Open(ctx context.Context, cfg Config) (*Publisher, error) {
	p := &Publisher{cfg: cfg, ce: cfg.CloudEvents.Mapper(ctx)}
	scheme := "amqp"
	if cfg.TLS {
		scheme = "amqps"
		var err error
		p.tls, err = publisher.TLSFiles{CA: cfg.TLSCA, Cert: cfg.TLSCert, Key: cfg.TLSKey, Insecure: cfg.TLSInsecure}.Config()
		if err != nil {
			return nil, fmt.Errorf("amqp URL: %w", err)
		}
	}
	p.dialURL = scheme + "://" + cfg.Host
	p.maxSize.Store(cfg.MaxMessageSize)
	return p, nil
}

// Publish writes the whole batch to the channel, then waits for the
// confirms. An event is delivered when RabbitMQ acked it and did not return
// it as unroutable.
func (p *Publisher) Publish(ctx context.Context, batch []outbox.Event) []error {
	errs := make([]error, len(batch))
	if len(batch) == 0 {
		return errs
	}
	s, err := p.session(ctx)
	if err != nil {
		return publisher.Fill(len(batch), publisher.Unavailable(err))
	}
	if reason := s.blockedReason(); reason != "" {
		return publisher.Fill(len(batch), publisher.Unavailable(errors.New("amqp: "+reason)))
	}
	pending := make([]*amqp091.DeferredConfirmation, len(batch))
	for i := range batch {
		msg, err := p.message(&batch[i], s.conn.Config.FrameSize)
		if err != nil {
			errs[i] = publisher.Permanent(err)
			continue
		}
		dc, err := s.ch.PublishWithDeferredConfirmWithContext(ctx, p.cfg.Exchange, batch[i].Type, true, false, msg)
		if err != nil {
			// Nothing after a failed publish may go out: a later event with
			// the same key would overtake this one.
			err = publisher.Dropped(fmt.Errorf("amqp: publish: %w", err))
			for j := i; j < len(batch); j++ {
				if errs[j] == nil {
					errs[j] = err
				}
			}
			break
		}
		pending[i] = dc
	}
	p.await(ctx, s, batch, pending, errs)
	return errs
}

// await waits for the confirms of pending and fills in errs.
func (p *Publisher) await(ctx context.Context, s *session, batch []outbox.Event, pending []*amqp091.DeferredConfirmation, errs []error) {
	timer := time.NewTimer(p.cfg.Timeout)
	defer timer.Stop()
	var waitErr error
	timedOut := false
wait:
	for _, dc := range pending {
		if dc == nil {
			continue
		}
		select {
		case <-dc.Done():
		case <-timer.C:
			timedOut = true
			waitErr = publisher.Unavailable(fmt.Errorf("amqp: RabbitMQ did not confirm within %s", p.cfg.Timeout))
			break wait
		case <-ctx.Done():
			waitErr = publisher.Unavailable(fmt.Errorf("amqp: waiting for confirms: %w", ctx.Err()))
			break wait
		}
	}
	s.sync()
	for i, dc := range pending {
		if dc == nil {
			continue
		}
		select {
		case <-dc.Done():
			errs[i] = p.result(s, &batch[i], dc)
		default:
			errs[i] = waitErr
		}
	}
	if timedOut {
		// Confirms that stay away this long mean a stuck connection; a new
		// one starts clean. The unconfirmed events are released and sent
		// again, which can duplicate them.
		s.abandon(p.cfg.Timeout)
	}
}

// Ping connects if needed, then checks the exchange on a channel of its
// own (a missing exchange closes the channel it is asked on): declared when
// declare=true, looked up otherwise. The check gives RabbitMQ the timeout to
// answer, whatever ctx allows: a broker that answers slowly is not gone,
// one that does not answer within the timeout is, and its connection is
// closed. Ping itself returns when ctx ends, so a caller with less time
// (/readyz has 2s) gets its answer in time; the check then finishes in the
// background, and its outcome is what the next Ping or Publish finds.
func (p *Publisher) Ping(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- p.ping(context.WithoutCancel(ctx)) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("amqp: health check: RabbitMQ did not answer in time: %w", ctx.Err())
	}
}

func (p *Publisher) ping(ctx context.Context) error {
	s, err := p.session(ctx)
	if err != nil {
		return err
	}
	if reason := s.blockedReason(); reason != "" {
		return errors.New("amqp: " + reason)
	}
	return p.answerWithin(s.conn, "health check", func() error {
		ch, err := s.conn.Channel()
		if err != nil {
			return fmt.Errorf("amqp: open channel: %w", err)
		}
		defer func() { _ = ch.Close() }()
		return p.checkExchange(ch)
	})
}

// Close closes the connection and waits for the driver's goroutine to end.
// Publish has already awaited or given up on every confirm, so nothing is
// waited for. Calling it again does nothing.
func (p *Publisher) Close(ctx context.Context) error {
	p.mu.Lock()
	s := p.sess
	p.sess, p.closed = nil, true
	p.mu.Unlock()
	if s != nil {
		timeout := p.cfg.Timeout
		if d, ok := ctx.Deadline(); ok {
			timeout = min(timeout, time.Until(d))
		}
		if ctx.Err() != nil {
			timeout = 0
		}
		s.abandon(timeout)
	}
	p.watchers.Wait()
	return nil
}
