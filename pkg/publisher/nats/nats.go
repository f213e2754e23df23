// Package nats publishes events to NATS JetStream. The whole batch goes out
// as asynchronous publishes and the acknowledgements are awaited afterwards,
// so a batch costs about one round trip. Each message carries the event id
// as Nats-Msg-Id, which lets the stream drop the copy a relay sends again
// after a crash. Register it by importing the package; it serves nats:// and
// tls:// URLs.
package nats

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/cloudevents"
	"github.com/outbox-relay/relay/pkg/publisher/option"
)

func init() {
	publisher.RegisterConfig(ParseURL, Open, "nats", "tls")
	publisher.RegisterOptions(Options, "nats", "tls")
	// What people call the broker, for the unknown scheme's did-you-mean.
	publisher.Alias("jetstream", "nats")
}

// Defaults for the URL options.
const (
	TimeoutDefault    = 5 * time.Second
	MaxPendingDefault = 16384
	// MaxControlLineDefault is nats-server's default max_control_line. The
	// server does not announce it, so a server configured otherwise needs
	// the max_control_line option.
	MaxControlLineDefault = 4096
)

// Config is a parsed nats:// or tls:// URL.
type Config struct {
	// Servers are the server URLs, without credentials.
	Servers []string
	User    string
	// Password is never logged.
	Password string
	// Token is the user info of a URL without a password
	// (nats://token@host), which NATS reads as a token. Never logged.
	Token string
	// SubjectPrefix is put before the event type to form the subject.
	SubjectPrefix string
	// Timeout bounds the wait for an acknowledgement and for connecting.
	Timeout time.Duration
	// MaxPending bounds the asynchronous publishes awaiting acknowledgement.
	MaxPending int
	// CredsFile, NkeySeedFile: NATS decentralised authentication.
	CredsFile    string
	NkeySeedFile string
	// TLS files; a tls:// URL or tls_ca alone turns TLS on.
	TLSCA, TLSCert, TLSKey string
	// Name is the connection name shown by the server.
	Name string
	// MaxControlLine is the server's max_control_line: the longest
	// protocol line it reads. A publish's line holds the subject, so this
	// bounds the subject; see maxSubjectLen.
	MaxControlLine int
	// CloudEvents are the format and ce_source options: with
	// format=cloudevents the attributes go in percent-encoded ce- headers
	// (NATS binding, binary content mode) instead of X-Event-*.
	CloudEvents cloudevents.Config
}

// ParseURL reads the driver's options from u: subject_prefix, timeout,
// max_pending, max_control_line, creds, nkey, tls_ca, tls_cert, tls_key,
// name, format, ce_source.
func ParseURL(u *url.URL) (Config, error) {
	cfg := Config{Timeout: TimeoutDefault, MaxPending: MaxPendingDefault, MaxControlLine: MaxControlLineDefault, Name: "outbox-relay"}
	if u.Host == "" {
		return cfg, fmt.Errorf("nats URL %q has no host: want %s://host:4222", u.Redacted(), u.Scheme)
	}
	for _, host := range strings.Split(u.Host, ",") {
		cfg.Servers = append(cfg.Servers, u.Scheme+"://"+host)
	}
	if u.User != nil {
		if pw, ok := u.User.Password(); ok {
			cfg.User, cfg.Password = u.User.Username(), pw
		} else {
			cfg.Token = u.User.Username()
		}
	}
	v, err := Options.Parse(u.Query())
	if err != nil {
		return cfg, err
	}
	cfg.CloudEvents = optCloudEvents.Get(v)
	cfg.SubjectPrefix = optSubjectPrefix.Get(v)
	cfg.Timeout = optTimeout.Get(v)
	cfg.MaxPending = int(optMaxPending.Get(v))
	cfg.MaxControlLine = int(optMaxControlLine.Get(v))
	cfg.CredsFile, cfg.NkeySeedFile = optCreds.Get(v), optNkey.Get(v)
	tls := optTLS.Get(v)
	cfg.TLSCA, cfg.TLSCert, cfg.TLSKey = tls.CA, tls.Cert, tls.Key
	cfg.Name = optName.Get(v)
	return cfg, nil
}

// Options are the driver's URL options, declared once: ParseURL reads
// them, and docs/brokers.md lists them as Options.Table writes them (a
// test holds the two together).
var Options = option.New("nats")

var (
	optSubjectPrefix = Options.String("subject_prefix", "",
		"Put before `event_type` to form the subject: `events.` + `orders.paid` → `events.orders.paid`.")
	optTimeout = Options.Duration("timeout", TimeoutDefault,
		"How long a batch waits for its acknowledgements once it is sent, and for connecting.")
	optMaxPending = Options.Int("max_pending", MaxPendingDefault,
		"Asynchronous publishes awaiting acknowledgement at once (across batches in flight).")
	optMaxControlLine = Options.Int("max_control_line", MaxControlLineDefault,
		"The server's `max_control_line`, which the server does not announce. It bounds the subject (see *Limits*); set it when the server is configured otherwise.").
		Min(controlLineReserve + 1).Unit("bytes").Hint("use the server's max_control_line (4096 unless configured)")
	optCreds = Options.String("creds", "", "Path of a `.creds` file (JWT + nkey seed) for decentralised auth.")
	optNkey  = Options.String("nkey", "", "Path of an nkey seed file.")
	optTLS   = Options.TLS(option.TLSDocs{
		CA: "CA certificate file for verifying the server. `tls://` turns TLS on with the system roots.",
	})
	optName        = Options.String("name", "outbox-relay", "Connection name shown by the server.")
	optCloudEvents = cloudevents.Declare(Options,
		"`format=cloudevents` sends [CloudEvents](#cloudevents--formatcloudevents) in binary mode: the attributes in `ce-` headers, percent-encoded. `ce_source` sets their `source`.")
)

// cePrefix starts the header of each CloudEvents attribute (NATS binding).
const cePrefix = "ce-"

// redialInterval is how long a connection the server closed is reported
// as it is before a new one is dialled, so that a server that refuses the
// client at once (authorization) is not dialled by every publish and ping.
const redialInterval = time.Second

var errClosed = errors.New("nats: publisher is closed")

// Publisher publishes to JetStream. It holds one connection, shared by
// concurrent Publish calls. nats.go reconnects a connection that breaks,
// but gives up on one the server closed with an error (a protocol line over
// max_control_line, an authorization error): the next Publish or Ping then
// opens a new one.
type Publisher struct {
	cfg  Config
	opts []natsgo.Option
	// ce maps events to CloudEvents attributes; nil sends X-Event-*.
	ce *cloudevents.Mapper

	mu       sync.Mutex // guards the fields below; held while dialling
	cur      *conn      // nil once closed
	closed   bool
	lastDial time.Time
	dialErr  error // why the last dial failed, reported until redialInterval passes

	// noAck holds the streams found unable to acknowledge, by name: Ping
	// keeps failing until each acknowledges again.
	noAckMu sync.Mutex
	noAck   map[string]struct{}

	pingMu  sync.Mutex // orders Ping's pings.Add before Close's pings.Wait
	stopped bool
	pings   sync.WaitGroup // Ping's checks, which Close waits for
}

// conn is one client connection with its JetStream context. It is replaced
// as a whole once the server has closed it.
type conn struct {
	nc *natsgo.Conn
	js jetstream.JetStream
	// acks is set once, right after connecting; nats.go's handlers may
	// run before.
	acks atomic.Pointer[acker]
	// gone is closed when the connection is closed for good.
	gone     chan struct{}
	goneOnce sync.Once
	// url is the server connected to last, for errors once disconnected.
	url     atomic.Pointer[string]
	servers string
	// dialErr is why the last attempt to (re)connect failed, such as a
	// refused connection; nats.go's LastError does not keep it.
	dialErr atomic.Pointer[error]
}

// Open connects to the servers. A server that is down is not an error: the
// connection keeps retrying in the background and Ping reports it.
func Open(ctx context.Context, cfg Config) (*Publisher, error) {
	switch {
	case cfg.MaxControlLine == 0:
		cfg.MaxControlLine = MaxControlLineDefault
	case cfg.MaxControlLine <= controlLineReserve:
		return nil, fmt.Errorf("nats: MaxControlLine %d leaves no room for a subject; use the server's max_control_line (4096 unless configured)", cfg.MaxControlLine)
	}
	opts := []natsgo.Option{
		natsgo.Name(cfg.Name),
		natsgo.Timeout(cfg.Timeout),
		natsgo.MaxReconnects(-1),
		natsgo.ReconnectWait(time.Second),
		natsgo.RetryOnFailedConnect(true),
		// No buffering while disconnected: a publish then fails at once and
		// the batch is released, instead of being sent later behind our back.
		natsgo.ReconnectBufSize(-1),
		// Errors reach the relay through Publish and Ping; nats.go would
		// print them to stderr.
		natsgo.ErrorHandler(func(*natsgo.Conn, *natsgo.Subscription, error) {}),
	}
	if cfg.User != "" || cfg.Password != "" {
		opts = append(opts, natsgo.UserInfo(cfg.User, cfg.Password))
	}
	if cfg.Token != "" {
		opts = append(opts, natsgo.Token(cfg.Token))
	}
	if cfg.CredsFile != "" {
		opts = append(opts, natsgo.UserCredentials(cfg.CredsFile))
	}
	if cfg.NkeySeedFile != "" {
		opt, err := natsgo.NkeyOptionFromSeed(cfg.NkeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("nats URL: nkey: %w", err)
		}
		opts = append(opts, opt)
	}
	if cfg.TLSCA != "" {
		opts = append(opts, natsgo.RootCAs(cfg.TLSCA))
	}
	if cfg.TLSCert != "" {
		opts = append(opts, natsgo.ClientCert(cfg.TLSCert, cfg.TLSKey))
	}
	p := &Publisher{cfg: cfg, opts: opts, noAck: map[string]struct{}{}, ce: cfg.CloudEvents.Mapper(ctx)}
	c, err := p.dial()
	if err != nil {
		return nil, err
	}
	p.cur, p.lastDial = c, time.Now()
	return p, nil
}

// dial opens a connection. With RetryOnFailedConnect a server that is down
// is no error: the connection keeps trying in the background.
func (p *Publisher) dial() (*conn, error) {
	c := &conn{gone: make(chan struct{}), servers: strings.Join(p.cfg.Servers, ",")}
	connected := func(nc *natsgo.Conn) {
		if u := nc.ConnectedUrlRedacted(); u != "" {
			c.url.Store(&u)
		}
		c.dialErr.Store(nil)
	}
	opts := append(slices.Clip(p.opts),
		natsgo.ConnectHandler(connected),
		natsgo.ReconnectHandler(connected),
		natsgo.ReconnectErrHandler(func(_ *natsgo.Conn, err error) {
			if err != nil {
				c.dialErr.Store(&err)
			}
		}),
		natsgo.ClosedHandler(func(*natsgo.Conn) { c.markGone() }),
		natsgo.DisconnectErrHandler(func(*natsgo.Conn, error) {
			if a := c.acks.Load(); a != nil {
				a.disconnected(natsgo.ErrDisconnected)
			}
		}),
	)
	nc, err := natsgo.Connect(c.servers, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS %s: %w", c.servers, err)
	}
	c.nc = nc
	connected(nc)
	// For API requests (stream lookups, account info); publishes go
	// through the acker.
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("open JetStream on NATS %s: %w", c.servers, err)
	}
	c.js = js
	acks, err := newAcker(nc, p.cfg.MaxPending)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("subscribe to JetStream's acknowledgements on NATS %s: %w", c.servers, err)
	}
	c.acks.Store(acks)
	return c, nil
}

func (c *conn) markGone() { c.goneOnce.Do(func() { close(c.gone) }) }

// server names the server for errors: the one connected to, or last
// connected to, or else the configured list. None of them holds
// credentials.
func (c *conn) server() string {
	if u := c.nc.ConnectedUrlRedacted(); u != "" {
		return u
	}
	if u := c.url.Load(); u != nil {
		return *u
	}
	return c.servers
}

// down describes a connection that is not connected now, with the reason
// nats.go last saw.
func (c *conn) down() error {
	if err := c.nc.LastError(); err != nil {
		if c.nc.IsClosed() {
			return fmt.Errorf("nats: server %s: the connection was closed: %w", c.server(), err)
		}
		return fmt.Errorf("nats: server %s: not connected: %w", c.server(), err)
	}
	if err := c.dialErr.Load(); err != nil {
		return fmt.Errorf("nats: server %s: not connected (status %s): %w", c.server(), c.nc.Status(), *err)
	}
	return fmt.Errorf("nats: server %s: not connected (status %s)", c.server(), c.nc.Status())
}

// connection returns the connection, opening a new one in place of one
// that is closed for good.
func (p *Publisher) connection() (*conn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errClosed
	}
	if !p.cur.nc.IsClosed() {
		return p.cur, nil
	}
	if time.Since(p.lastDial) < redialInterval {
		if p.dialErr != nil {
			return nil, p.dialErr
		}
		return p.cur, nil // closed: callers report why
	}
	c, err := p.dial()
	p.lastDial, p.dialErr = time.Now(), err
	if err != nil {
		return nil, err
	}
	p.cur = c
	return c, nil
}

// Publish sends the whole batch, then waits for every acknowledgement. A
// Duplicate acknowledgement counts as delivered: the stream holds the event.
func (p *Publisher) Publish(ctx context.Context, batch []outbox.Event) []error {
	c, err := p.connection()
	if err != nil {
		return publisher.Fill(len(batch), publisher.Unavailable(err))
	}
	if !c.nc.IsConnected() {
		return publisher.Fill(len(batch), publisher.Unavailable(c.down()))
	}
	reconnects := c.nc.Stats().Reconnects
	parts := newMessageParts(batch)
	subjects := make([]string, len(batch))
	acks := c.acks.Load()
	b := acks.begin(len(batch))
	for i := range batch {
		msg, err := p.message(c, &batch[i], &parts, i)
		if err != nil {
			acks.settle(b, i, publisher.Permanent(err))
			continue
		}
		subjects[i], msg.Reply = msg.Subject, b.reply(i)
		select {
		case acks.slots <- struct{}{}:
		case <-ctx.Done():
			continue // unanswered: released below
		case <-c.gone:
			continue
		}
		acks.hold(b, i)
		if err := c.nc.PublishMsg(msg); err != nil {
			acks.settle(b, i, err)
		}
	}
	timeout := time.NewTimer(p.cfg.Timeout)
	select {
	case <-b.done:
	case <-timeout.C:
	case <-c.gone:
	case <-ctx.Done():
	}
	timeout.Stop()
	answered, results := acks.end(b)

	// What a stream lookup found, per subject: a batch for a missing stream
	// asks JetStream once, not once per event.
	verdicts := map[string]error{}
	errs := make([]error, len(batch))
	for i, err := range results {
		switch {
		case answered[i] && (err == nil || publisher.IsPermanent(err)):
			errs[i] = err
		case answered[i]:
			errs[i] = p.classify(ctx, c, subjects[i], err, verdicts)
		case ctx.Err() != nil:
			errs[i] = publisher.Unavailable(fmt.Errorf("nats: waiting for ack: %w", ctx.Err()))
		case c.nc.IsClosed():
			// Closed for good, so no answer is coming that has not come.
			errs[i] = publisher.Unavailable(c.down())
		default:
			errs[i] = p.classify(ctx, c, subjects[i], jetstream.ErrAsyncPublishTimeout, verdicts)
		}
	}
	if ctx.Err() == nil && (!c.nc.IsConnected() || c.nc.Stats().Reconnects != reconnects) {
		// The connection was up when the batch began and went down under
		// it: the events it took with it were dropped, and the batch may
		// hold the one the server closed it over.
		for i, err := range errs {
			if publisher.IsUnavailable(err) {
				errs[i] = publisher.Dropped(err)
			}
		}
	}
	return errs
}

// messageParts is what a batch's messages are made of, allocated once per
// batch rather than piece by piece per event: this is the hot path, and
// nats.go wants every message as a map of header slices.
type messageParts struct {
	msgs []natsgo.Msg
	// ids holds every event id as text, 36 bytes each.
	ids string
	// values backs the header values, one-element slices carved from it.
	values []string
}

func newMessageParts(batch []outbox.Event) messageParts {
	text := make([]byte, 0, 36*len(batch))
	for i := range batch {
		text = appendUUID(text, batch[i].ID)
	}
	return messageParts{
		msgs:   make([]natsgo.Msg, len(batch)),
		ids:    string(text),
		values: make([]string, 0, 4*len(batch)),
	}
}

// value returns v as a header's value list, capped so that an append to it
// cannot run into another header's.
func (m *messageParts) value(v string) []string {
	m.values = append(m.values, v)
	n := len(m.values)
	return m.values[n-1 : n : n]
}

// appendUUID appends id in its canonical text form, as uuid.UUID.String
// writes it, without allocating.
func appendUUID(dst []byte, id [16]byte) []byte {
	const hexDigits = "0123456789abcdef"
	for i, b := range id {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			dst = append(dst, '-')
		}
		dst = append(dst, hexDigits[b>>4], hexDigits[b&0xf])
	}
	return dst
}

// message builds the JetStream message for e, the i-th event of the batch,
// from parts, or says why it cannot exist.
func (p *Publisher) message(c *conn, e *outbox.Event, parts *messageParts, i int) (*natsgo.Msg, error) {
	subject := p.cfg.SubjectPrefix + e.Type
	if err := p.checkSubject(e, subject); err != nil {
		return nil, err
	}
	headers, err := outbox.ParseHeaders(e.Headers)
	if err != nil {
		return nil, err
	}
	var attrs []cloudevents.Attribute
	if p.ce != nil {
		if attrs, err = p.ce.Attributes(e, headers); err != nil {
			return nil, err
		}
	}
	h := make(natsgo.Header, len(headers)+len(attrs)+4)
	for k, v := range headers {
		if reservedHeader(k) || p.ce != nil && cloudevents.IsRelayAttribute(cePrefix, k) {
			continue
		}
		if err := validHeader(k, v); err != nil {
			return nil, err
		}
		h[k] = parts.value(v)
	}
	id := parts.value(parts.ids[36*i : 36*i+36])
	// Nats-Msg-Id set here rather than through a publish option: the
	// stream drops a copy it has seen within its duplicate window.
	h[jetstream.MsgIDHeader] = id
	if p.ce == nil {
		// The event type needs no such check: checkSubject already refused
		// every white space in it.
		h[outbox.HeaderEventID] = id
		h[outbox.HeaderEventType] = parts.value(e.Type)
		if e.PartitionKey != "" {
			if err := checkPartitionKey(e.PartitionKey); err != nil {
				return nil, err
			}
			h[outbox.HeaderPartitionKey] = parts.value(e.PartitionKey)
		}
	}
	for _, a := range attrs {
		// nats.go trims values and reads the header block as text, so the
		// binding's percent-encoding is what lets any value through.
		h[cePrefix+a.Name] = parts.value(cloudevents.PercentEncode(a.Value))
	}
	if err := checkSize(c.nc.MaxPayload(), headerSize(h), len(e.Payload)); err != nil {
		return nil, err
	}
	msg := &parts.msgs[i]
	msg.Subject, msg.Header, msg.Data = subject, h, e.Payload
	return msg, nil
}

// reservedHeader reports whether a row header is left out: JetStream acts
// on Nats-* headers (Nats-Rollup purges the stream, Nats-Expected-* make
// publishes fail, a second Nats-Msg-Id in another case would compete with
// the event id that deduplication relies on), and the event's own headers
// come from its columns. NATS header names are case-sensitive, so a row's
// "x-event-id" would otherwise travel next to the driver's X-Event-ID.
func reservedHeader(k string) bool {
	return len(k) >= 5 && strings.EqualFold(k[:5], "Nats-") || outbox.IsEventHeader(k)
}

// JetStream error codes the driver tells apart.
const (
	// errCodeStreamStoreFailed is "stream store failed", which includes
	// "maximum messages exceeded" and "maximum bytes exceeded".
	errCodeStreamStoreFailed jetstream.ErrorCode = 10077
	// errCodeHeaderTooLarge is "header size exceeds maximum allowed of
	// 64k"; checkSize refuses such messages before they are sent.
	errCodeHeaderTooLarge jetstream.ErrorCode = 10097
)

// classify sorts a publish error into permanent (the event can never be
// stored), unavailable (the broker cannot take anything now) or retryable.
// verdicts caches stream lookups for the batch by subject.
func (p *Publisher) classify(ctx context.Context, c *conn, subject string, err error, verdicts map[string]error) error {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, natsgo.ErrMaxPayload):
		return publisher.Permanent(fmt.Errorf("message too large for the NATS server's max_payload (%d bytes): %w", c.nc.MaxPayload(), err))
	case errors.Is(err, jetstream.ErrStreamMessageExceedsMaximum):
		return publisher.Permanent(fmt.Errorf("message too large for the stream's max_msg_size: %w", err))
	case errors.Is(err, natsgo.ErrBadSubject):
		return publisher.Permanent(fmt.Errorf("invalid subject %q: %w", publisher.Clip(subject), err))
	case errors.Is(err, natsgo.ErrBadHeaderMsg):
		return publisher.Permanent(fmt.Errorf("invalid NATS header: %w", err))
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, natsgo.ErrNoResponders):
		return verdict(verdicts, subject, func() error { return p.noResponders(ctx, c, subject, err) })
	case errors.Is(err, jetstream.ErrAsyncPublishTimeout):
		return verdict(verdicts, subject, func() error { return p.unacknowledged(ctx, c, subject, err) })
	case errors.As(err, &apiErr):
		switch {
		case apiErr.ErrorCode == errCodeHeaderTooLarge:
			return publisher.Permanent(fmt.Errorf("headers too large for JetStream (at most %d bytes): %w", maxHeaderBytes, err))
		case apiErr.ErrorCode == errCodeStreamStoreFailed:
			// A stream at its limits with the discard-new policy answers
			// 503 with this code. Only the events for that stream are
			// stuck, so they retry with backoff while the others flow.
			return fmt.Errorf("stream refused the message: %w", err)
		case apiErr.ErrorCode == jetstream.JSErrCodeJetStreamNotEnabled ||
			apiErr.ErrorCode == jetstream.JSErrCodeJetStreamNotEnabledForAccount || apiErr.Code >= 500:
			return publisher.Unavailable(fmt.Errorf("nats: server %s: %w", c.server(), err))
		}
		return fmt.Errorf("jetstream rejected the message: %w", err)
	case errors.Is(err, natsgo.ErrTimeout),
		errors.Is(err, natsgo.ErrDisconnected), errors.Is(err, natsgo.ErrConnectionClosed),
		errors.Is(err, natsgo.ErrReconnectBufExceeded), errors.Is(err, jetstream.ErrTooManyStalledMsgs),
		errors.Is(err, natsgo.ErrNoServers), errors.Is(err, natsgo.ErrConnectionDraining),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		if !c.nc.IsConnected() {
			return publisher.Unavailable(fmt.Errorf("%w (%w)", c.down(), err))
		}
		return publisher.Unavailable(fmt.Errorf("nats: server %s: %w", c.server(), err))
	}
	if !c.nc.IsConnected() {
		// Whatever the error says, a lost connection is to blame.
		return publisher.Unavailable(fmt.Errorf("%w (%w)", c.down(), err))
	}
	return err
}

// verdict returns what verdicts holds for subject, or finds it out once.
func verdict(verdicts map[string]error, subject string, find func() error) error {
	if v, ok := verdicts[subject]; ok {
		return v
	}
	v := find()
	verdicts[subject] = v
	return v
}

// noResponders tells a subject no stream listens on (permanent) from a
// JetStream that is not answering at all (unavailable).
func (p *Publisher) noResponders(ctx context.Context, c *conn, subject string, err error) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	_, lookupErr := c.js.StreamNameBySubject(ctx, subject)
	if errors.Is(lookupErr, jetstream.ErrStreamNotFound) {
		// The fix named is relay-cli's, which every user of the relay has;
		// the nats CLI is a separate install.
		return publisher.Permanent(fmt.Errorf("no JetStream stream captures subject %q; create one (relay-cli setup-broker --event-type %q) or fix the event type or subject_prefix",
			subject, strings.TrimPrefix(subject, p.cfg.SubjectPrefix)))
	}
	if lookupErr != nil {
		return publisher.Unavailable(fmt.Errorf("nats: server %s: no response from JetStream for %q: %w", c.server(), subject, err))
	}
	// The stream exists but does not answer (no leader, or restarting):
	// nothing sent to it can succeed now, so the relay pauses rather than
	// spending the events' attempts.
	return publisher.Unavailable(fmt.Errorf("nats: server %s: no response from stream for %q: %w", c.server(), subject, err))
}

// unacknowledged explains an acknowledgement that did not come. A stream created
// with no_ack stores messages without ever answering, so nothing sent to it
// can be confirmed: the relay pauses, Ping names the stream until it
// acknowledges again, and the events keep their attempts.
func (p *Publisher) unacknowledged(ctx context.Context, c *conn, subject string, err error) error {
	timedOut := publisher.Unavailable(fmt.Errorf("nats: server %s: no acknowledgement for subject %q within %s: %w", c.server(), publisher.Clip(subject), p.cfg.Timeout, err))
	if !c.nc.IsConnected() {
		return publisher.Unavailable(fmt.Errorf("%w (%w)", c.down(), err))
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	name, lookupErr := c.js.StreamNameBySubject(ctx, subject)
	if lookupErr != nil {
		return timedOut
	}
	stream, lookupErr := c.js.Stream(ctx, name)
	if lookupErr != nil || !stream.CachedInfo().Config.NoAck {
		return timedOut
	}
	p.noAckMu.Lock()
	p.noAck[name] = struct{}{}
	p.noAckMu.Unlock()
	return publisher.Unavailable(noAckError(c, name))
}

func noAckError(c *conn, stream string) error {
	return fmt.Errorf("nats: server %s: stream %q has no_ack set, so JetStream never acknowledges what it stores and the relay cannot confirm any event; turn acknowledgements on (nats stream edit %s --ack)",
		c.server(), stream, stream)
}

// Ping checks that the connection is up, JetStream answers, and no stream
// the relay publishes to was found unable to acknowledge. It opens a new
// connection in place of one the server closed. It returns when ctx ends;
// a check still running then finishes in the background.
func (p *Publisher) Ping(ctx context.Context) error {
	p.pingMu.Lock()
	if p.stopped {
		p.pingMu.Unlock()
		return errClosed
	}
	p.pings.Add(1)
	p.pingMu.Unlock()
	done := make(chan error, 1)
	go func() {
		defer p.pings.Done()
		done <- p.ping(context.WithoutCancel(ctx))
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("nats: server %s: health check: no answer in time: %w", strings.Join(p.cfg.Servers, ","), ctx.Err())
	}
}

func (p *Publisher) ping(ctx context.Context) error {
	c, err := p.connection()
	if err != nil {
		return err
	}
	if !c.nc.IsConnected() {
		return c.down()
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	if _, err := c.js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("nats: server %s: JetStream does not answer: %w", c.server(), err)
	}
	p.noAckMu.Lock()
	names := slices.Sorted(maps.Keys(p.noAck))
	p.noAckMu.Unlock()
	for _, name := range names {
		stream, err := c.js.Stream(ctx, name)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
		case err != nil:
			return fmt.Errorf("nats: server %s: look up stream %q: %w", c.server(), name, err)
		case stream.CachedInfo().Config.NoAck:
			return noAckError(c, name)
		}
		p.noAckMu.Lock()
		delete(p.noAck, name)
		p.noAckMu.Unlock()
	}
	return nil
}

// Close closes the connection and waits for health checks still running.
// Publish has already awaited or given up on every acknowledgement, so
// nothing is waited for. Calling it again does nothing.
func (p *Publisher) Close(context.Context) error {
	p.mu.Lock()
	c := p.cur
	p.cur, p.closed = nil, true
	p.mu.Unlock()
	if c != nil {
		c.nc.Close()
	}
	p.pingMu.Lock()
	p.stopped = true
	p.pingMu.Unlock()
	p.pings.Wait()
	return nil
}
