// This file: the connection and channel a Publisher keeps, and what the broker tells it.

package amqp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/relay/internal/redact"
)

// redialInterval is how long a failed connection attempt is reported again
// instead of dialling anew, so that the batches in flight when the broker
// went away do not each wait out a dial timeout in turn.
const redialInterval = time.Second

// session is one connection with its confirm-mode channel. It is replaced as
// a whole when either closes.
type session struct {
	conn *amqp091.Connection
	ch   *amqp091.Channel

	syncReq chan chan struct{}
	// gone is closed once the channel has closed and closeErr is set.
	gone     chan struct{}
	closeErr *amqp091.Error // nil for a close we asked for

	mu       sync.Mutex
	returned map[string]amqp091.Return // by message_id
	blocked  string                    // why RabbitMQ blocks publishing, "" when it does not
}

// session returns the live session, connecting when there is none.
func (p *Publisher) session(ctx context.Context) (*session, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errClosed
	}
	if s := p.sess; s != nil {
		if !s.ch.IsClosed() && !s.conn.IsClosed() {
			return s, nil
		}
		s.abandon(p.cfg.Timeout)
		p.sess = nil
	}
	if p.dialErr != nil && time.Since(p.lastDial) < redialInterval {
		return nil, p.dialErr
	}
	s, err := p.connect(ctx)
	if ctx.Err() == nil {
		p.lastDial, p.dialErr = time.Now(), err
	}
	if err != nil {
		return nil, err
	}
	p.sess = s
	return s, nil
}

// dial opens a connection to the broker, with the URL's credentials,
// vhost, heartbeat and TLS.
func (p *Publisher) dial(ctx context.Context) (*amqp091.Connection, error) {
	cfg := amqp091.Config{
		// A fresh PlainAuth each time: amqp091 wipes the password from the
		// one it used once the connection is open.
		SASL:       []amqp091.Authentication{&amqp091.PlainAuth{Username: p.cfg.User, Password: p.cfg.Password}},
		Vhost:      p.cfg.Vhost,
		Heartbeat:  p.cfg.Heartbeat,
		Properties: amqp091.NewConnectionProperties(),
		Dial:       p.dialer(ctx),
	}
	cfg.Properties.SetClientConnectionName(p.cfg.Name)
	if p.tls != nil {
		cfg.TLSClientConfig = p.tls.Clone() // amqp091 fills in ServerName
	}
	conn, err := amqp091.DialConfig(p.dialURL, cfg)
	if err != nil {
		// amqp091 may quote the URL it was given; that URL carries no
		// credentials (they go through SASL), but scrub it all the same.
		return nil, fmt.Errorf("amqp: connect to RabbitMQ at %s (vhost %q): %s", p.cfg.Host, p.cfg.Vhost,
			redact.Error(err, p.dialURL))
	}
	return conn, nil
}

// connect dials, opens the channel, checks or declares the exchange and
// turns confirms on.
func (p *Publisher) connect(ctx context.Context) (*session, error) {
	conn, err := p.dial(ctx)
	if err != nil {
		return nil, err
	}
	var ch *amqp091.Channel
	err = p.answerWithin(conn, "set up the channel", func() error {
		var err error
		if ch, err = conn.Channel(); err != nil {
			return fmt.Errorf("amqp: open channel: %w", err)
		}
		if err := p.checkExchange(ch); err != nil {
			return err
		}
		if err := ch.Confirm(false); err != nil {
			return fmt.Errorf("amqp: turn on publisher confirms: %w", err)
		}
		return nil
	})
	if err != nil {
		_ = conn.CloseDeadline(time.Now().Add(p.cfg.Timeout))
		return nil, err
	}
	s := &session{
		conn:     conn,
		ch:       ch,
		syncReq:  make(chan chan struct{}),
		gone:     make(chan struct{}),
		returned: map[string]amqp091.Return{},
	}
	// Buffered: amqp091 sends the close reason without waiting for us.
	closes := ch.NotifyClose(make(chan *amqp091.Error, 1))
	// Unbuffered on purpose: amqp091 then hands each return to watch
	// before it reads the ack that follows it, which sync relies on.
	returns := ch.NotifyReturn(make(chan amqp091.Return))
	blocks := conn.NotifyBlocked(make(chan amqp091.Blocking))
	p.watchers.Add(1)
	go func() {
		defer p.watchers.Done()
		s.watch(closes, returns, blocks, p.cfg.Timeout)
	}()
	return s, nil
}

// dialer connects with the timeout and ctx, and gives every write a
// deadline: a broker that stops reading (a resource alarm blocks publishing
// connections) would otherwise hang a publish, and with it shutdown, forever.
func (p *Publisher) dialer(ctx context.Context) func(network, addr string) (net.Conn, error) {
	return func(network, addr string) (net.Conn, error) {
		d := net.Dialer{Timeout: p.cfg.Timeout}
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		// Bounds the TLS and AMQP handshakes; amqp091 clears it afterwards.
		if err := c.SetDeadline(time.Now().Add(p.cfg.Timeout)); err != nil {
			_ = c.Close()
			return nil, err
		}
		return &writeDeadlineConn{Conn: c, timeout: p.cfg.Timeout}, nil
	}
}

// answerWithin runs fn, a few calls on conn, and closes conn if RabbitMQ has
// not answered them within the timeout: amqp091 calls cannot be cancelled,
// and only missed heartbeats would end the wait otherwise.
func (p *Publisher) answerWithin(conn *amqp091.Connection, what string, fn func() error) error {
	watchdog := time.AfterFunc(p.cfg.Timeout, func() { _ = conn.CloseDeadline(time.Now()) })
	err := fn()
	if !watchdog.Stop() {
		return fmt.Errorf("amqp: %s: RabbitMQ did not answer within %s", what, p.cfg.Timeout)
	}
	return err
}

type writeDeadlineConn struct {
	net.Conn
	timeout time.Duration
}

func (c *writeDeadlineConn) Write(b []byte) (int, error) {
	if err := c.SetWriteDeadline(time.Now().Add(c.timeout)); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

// checkExchange declares the exchange, or checks that it exists. A missing
// exchange makes RabbitMQ close the channel; ch must not be shared.
func (p *Publisher) checkExchange(ch *amqp091.Channel) error {
	name := p.cfg.Exchange
	if name == "" {
		return nil // the default exchange always exists and cannot be declared
	}
	if p.cfg.Declare {
		if err := ch.ExchangeDeclare(name, p.cfg.ExchangeType, true, false, false, false, nil); err != nil {
			return fmt.Errorf("amqp: declare exchange %q (type %s, durable): %w", name, p.cfg.ExchangeType, err)
		}
		return nil
	}
	err := ch.ExchangeDeclarePassive(name, p.cfg.ExchangeType, true, false, false, false, nil)
	var amqpErr *amqp091.Error
	if errors.As(err, &amqpErr) && amqpErr.Code == amqp091.NotFound {
		return p.missingExchange(err)
	}
	if err != nil {
		return fmt.Errorf("amqp: check exchange %q: %w", name, err)
	}
	return nil
}

func (p *Publisher) missingExchange(err error) error {
	return fmt.Errorf("amqp: exchange %q does not exist in vhost %q: create it (relay-cli setup-broker) or add declare=true to the URL: %w",
		p.cfg.Exchange, p.cfg.Vhost, err)
}

// watch records returned messages, blocking notices and the close reason
// until the channel closes, then closes the connection too.
func (s *session) watch(closes <-chan *amqp091.Error, returns <-chan amqp091.Return, blocks <-chan amqp091.Blocking, timeout time.Duration) {
	defer func() {
		close(s.gone)
		_ = s.conn.CloseDeadline(time.Now().Add(timeout))
	}()
	for {
		select {
		case err, ok := <-closes:
			if !ok {
				return
			}
			s.closeErr = err
		case r, ok := <-returns:
			if !ok {
				returns = nil
				continue
			}
			s.mu.Lock()
			s.returned[r.MessageId] = r
			s.mu.Unlock()
		case b, ok := <-blocks:
			if !ok {
				blocks = nil
				continue
			}
			s.mu.Lock()
			s.blocked = ""
			if b.Active {
				s.blocked = "RabbitMQ is blocking publishers: " + b.Reason
			}
			s.mu.Unlock()
		case done := <-s.syncReq:
			close(done)
		}
	}
}

// sync returns once watch has recorded every message returned before the
// acks seen so far: RabbitMQ sends a return before the ack for the same
// message, and amqp091 delivers it to watch before reading further.
func (s *session) sync() {
	done := make(chan struct{})
	select {
	case s.syncReq <- done:
		<-done
	case <-s.gone:
	}
}

func (s *session) takeReturn(id string) (amqp091.Return, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.returned[id]
	delete(s.returned, id)
	return r, ok
}

func (s *session) blockedReason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.blocked
}

// abandon closes the connection; watch then ends.
func (s *session) abandon(timeout time.Duration) {
	_ = s.conn.CloseDeadline(time.Now().Add(timeout))
}
