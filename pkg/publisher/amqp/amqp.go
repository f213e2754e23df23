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
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/relay/internal/redact"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/cloudevents"
	"github.com/outbox-relay/relay/pkg/publisher/option"
)

func init() {
	publisher.RegisterConfig(ParseURL, Open, "amqp", "amqps")
	publisher.RegisterOptions(Options, "amqp", "amqps")
	// What people call the broker, for the unknown scheme's did-you-mean.
	publisher.Alias("rabbitmq", "amqp")
	publisher.Alias("rabbit", "amqp")
}

// Defaults for the URL options.
const (
	ExchangeDefault     = "outbox"
	ExchangeTypeDefault = "topic"
	TimeoutDefault      = 5 * time.Second
	HeartbeatDefault    = 10 * time.Second
	// MaxMessageSizeDefault is RabbitMQ 3.x's default max_message_size.
	MaxMessageSizeDefault = 128 << 20
	NameDefault           = "outbox-relay"
)

// maxShortstr is the longest AMQP short string: routing keys, header names,
// content types and exchange names. amqp091 cannot encode a longer one, and a
// frame that fails half-way kills the whole connection, so such events are
// refused before anything is written.
const maxShortstr = 255

// redialInterval is how long a failed connection attempt is reported again
// instead of dialling anew, so that the batches in flight when the broker
// went away do not each wait out a dial timeout in turn.
const redialInterval = time.Second

// cePrefix starts the header of each CloudEvents attribute. The AMQP
// binding names application properties "cloudEvents:" or "cloudEvents_"
// and the attribute; RabbitMQ's headers table is what becomes application
// properties for AMQP 1.0 consumers, and ':' is what the CloudEvents SDKs
// for Go, .NET and Java read.
const cePrefix = "cloudEvents:"

// Config is a parsed amqp:// or amqps:// URL.
type Config struct {
	// TLS is true for amqps://.
	TLS bool
	// Host is host:port; the port defaults to 5672, or 5671 with TLS.
	Host string
	// User and Password default to guest/guest when the URL has no user
	// info. Password is never logged.
	User, Password string
	// Vhost is the URL's path without its leading slash; no path or "/"
	// is the default vhost "/" (write %2f to name it explicitly).
	Vhost string
	// Exchange receives every event; empty is the default exchange, which
	// routes to the queue named like the routing key.
	Exchange string
	// ExchangeType is used only when Declare is set.
	ExchangeType string
	// Declare declares the exchange (durable) on every connect; otherwise
	// it must already exist.
	Declare bool
	// Timeout bounds connecting and the wait for a batch's confirms.
	Timeout time.Duration
	// Heartbeat is the AMQP heartbeat interval: a silent dead connection is
	// noticed after about three of them.
	Heartbeat time.Duration
	// MaxMessageSize is the largest payload sent; larger events go DEAD
	// without reaching the broker. Set it to the server's max_message_size.
	MaxMessageSize int64
	// Name is the connection name the management UI shows.
	Name string
	// TLS files: CA to verify the server with (default: system roots),
	// client certificate and key for mutual TLS.
	TLSCA, TLSCert, TLSKey string
	// TLSInsecure skips verifying the server's certificate.
	TLSInsecure bool
	// CloudEvents are the format and ce_source options: with
	// format=cloudevents the attributes go in cloudEvents: headers (AMQP
	// binding, binary content mode) instead of X-Event-*.
	CloudEvents cloudevents.Config
}

// validExchange is what RabbitMQ accepts in an exchange name.
var validExchange = regexp.MustCompile(`^[a-zA-Z0-9_.:\-]*$`)

// ParseURL reads the driver's options from u: exchange, exchange_type,
// declare, timeout, heartbeat, max_message_size, name, tls_ca, tls_cert,
// tls_key, tls_insecure, format, ce_source.
func ParseURL(u *url.URL) (Config, error) {
	cfg := Config{
		TLS:            strings.EqualFold(u.Scheme, "amqps"),
		User:           "guest",
		Password:       "guest",
		Exchange:       ExchangeDefault,
		ExchangeType:   ExchangeTypeDefault,
		Timeout:        TimeoutDefault,
		Heartbeat:      HeartbeatDefault,
		MaxMessageSize: MaxMessageSizeDefault,
		Name:           NameDefault,
	}
	if u.Hostname() == "" {
		return cfg, fmt.Errorf("amqp URL %q has no host: want %s://user:password@host:5672/vhost", u.Redacted(), u.Scheme)
	}
	if strings.Contains(u.Host, ",") {
		return cfg, fmt.Errorf("amqp URL %q: one host only (use a load balancer or DNS name for a cluster)", u.Redacted())
	}
	cfg.Host = u.Host
	if u.Port() == "" {
		port := "5672"
		if cfg.TLS {
			port = "5671"
		}
		cfg.Host = net.JoinHostPort(u.Hostname(), port)
	}
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Password, _ = u.User.Password()
	}
	if cfg.Vhost = strings.TrimPrefix(u.Path, "/"); cfg.Vhost == "" {
		cfg.Vhost = "/"
	}

	v, err := Options.Parse(u.Query())
	if err != nil {
		return cfg, err
	}
	cfg.CloudEvents = optCloudEvents.Get(v)
	if exchange, ok := optExchange.Lookup(v); ok {
		cfg.Exchange = exchange // empty is the default exchange
	}
	if len(cfg.Exchange) > maxShortstr || !validExchange.MatchString(cfg.Exchange) {
		return cfg, fmt.Errorf("amqp URL: exchange=%q is not a valid exchange name (letters, digits, '-', '_', '.', ':'; at most 255 bytes)", cfg.Exchange)
	}
	cfg.ExchangeType = optExchangeType.Get(v)
	cfg.Declare = optDeclare.Get(v)
	if cfg.Declare && cfg.Exchange == "" {
		return cfg, fmt.Errorf("amqp URL: declare=true needs a named exchange; the default exchange always exists")
	}
	cfg.Timeout, cfg.Heartbeat = optTimeout.Get(v), optHeartbeat.Get(v)
	cfg.MaxMessageSize = optMaxMessageSize.Get(v)
	cfg.Name = optName.Get(v)
	files := optTLS.Get(v)
	cfg.TLSCA, cfg.TLSCert, cfg.TLSKey, cfg.TLSInsecure = files.CA, files.Cert, files.Key, files.Insecure
	if !cfg.TLS && !files.IsZero() {
		return cfg, fmt.Errorf("amqp URL: tls_* options need an amqps:// URL")
	}
	return cfg, nil
}

// Options are the driver's URL options, declared once: ParseURL reads
// them, and docs/brokers.md lists them as Options.Table writes them (a
// test holds the two together).
var Options = option.New("amqp")

var (
	optExchange = Options.String("exchange", ExchangeDefault,
		"The exchange every event is published to. `exchange=` (empty) is the default exchange, which delivers to the queue named like the routing key.")
	optExchangeType = Options.String("exchange_type", ExchangeTypeDefault,
		"Type the exchange is declared with; used only with `declare=true`.")
	optDeclare = Options.Bool("declare", false,
		"`true` declares the exchange, durable, on every connect (and in every health check), so it exists even if someone deleted it. Otherwise the exchange must exist.")
	optTimeout = Options.Duration("timeout", TimeoutDefault,
		"Bounds connecting, the wait for a batch's confirms, and each write to the connection.")
	optHeartbeat = Options.Duration("heartbeat", HeartbeatDefault,
		"AMQP heartbeat interval (at least 1s); a connection that goes silent is noticed after about three.").
		Min(time.Second, "AMQP counts heartbeats in seconds")
	optMaxMessageSize = Options.Int("max_message_size", MaxMessageSizeDefault,
		"Largest payload sent, in bytes; larger events go `DEAD` without reaching RabbitMQ. Set it to the server's `max_message_size` (128 MiB on RabbitMQ 3.x, 16 MiB on 4.x).").
		Unit("bytes")
	optName = Options.String("name", NameDefault, "Connection name shown in the management UI.")
	optTLS  = Options.TLS(option.TLSDocs{
		CA:       "CA certificate file for verifying the server (`amqps://` only; the system roots otherwise).",
		Insecure: "`true` skips verifying the server's certificate (tests only).",
	})
	optCloudEvents = cloudevents.Declare(Options,
		"`format=cloudevents` sends [CloudEvents](#cloudevents--formatcloudevents) in binary mode: the attributes in `cloudEvents:` headers, `datacontenttype` in the `content_type` property. `ce_source` sets their `source`.")
)

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
