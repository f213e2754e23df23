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
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
)

func init() {
	publisher.RegisterConfig(ParseURL, Open, "nats", "tls")
}

// Defaults for the URL options.
const (
	TimeoutDefault    = 5 * time.Second
	MaxPendingDefault = 16384
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
}

// ParseURL reads the driver's options from u: subject_prefix, timeout,
// max_pending, creds, nkey, tls_ca, tls_cert, tls_key, name.
func ParseURL(u *url.URL) (Config, error) {
	cfg := Config{Timeout: TimeoutDefault, MaxPending: MaxPendingDefault, Name: "outbox-relay"}
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
	q := u.Query()
	if err := publisher.CheckOptions(q, knownOptions); err != nil {
		return cfg, fmt.Errorf("nats URL: %w", err)
	}
	cfg.SubjectPrefix = q.Get("subject_prefix")
	if v := q.Get("timeout"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return cfg, fmt.Errorf("nats URL: timeout=%q is not a positive duration such as 5s", v)
		}
		cfg.Timeout = d
	}
	if v := q.Get("max_pending"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return cfg, fmt.Errorf("nats URL: max_pending=%q is not a positive integer", v)
		}
		cfg.MaxPending = n
	}
	cfg.CredsFile, cfg.NkeySeedFile = q.Get("creds"), q.Get("nkey")
	cfg.TLSCA, cfg.TLSCert, cfg.TLSKey = q.Get("tls_ca"), q.Get("tls_cert"), q.Get("tls_key")
	if err := (publisher.TLSFiles{CA: cfg.TLSCA, Cert: cfg.TLSCert, Key: cfg.TLSKey}).Validate(); err != nil {
		return cfg, fmt.Errorf("nats URL: %w", err)
	}
	if v := q.Get("name"); v != "" {
		cfg.Name = v
	}
	return cfg, nil
}

// errCodeStreamStoreFailed is JetStream's "stream store failed" error,
// which includes "maximum messages exceeded" and "maximum bytes exceeded".
const errCodeStreamStoreFailed jetstream.ErrorCode = 10077

// knownOptions are the URL query parameters the driver reads.
var knownOptions = []string{"subject_prefix", "timeout", "max_pending", "creds", "nkey", "tls_ca", "tls_cert", "tls_key", "name"}

// Publisher publishes to JetStream.
type Publisher struct {
	cfg       Config
	nc        *natsgo.Conn
	js        jetstream.JetStream
	closeOnce sync.Once
}

// Open connects to the servers. A server that is down is not an error: the
// connection keeps retrying in the background and Ping reports it.
func Open(_ context.Context, cfg Config) (*Publisher, error) {
	opts := []natsgo.Option{
		natsgo.Name(cfg.Name),
		natsgo.Timeout(cfg.Timeout),
		natsgo.MaxReconnects(-1),
		natsgo.ReconnectWait(time.Second),
		natsgo.RetryOnFailedConnect(true),
		// No buffering while disconnected: a publish then fails at once and
		// the batch is released, instead of being sent later behind our back.
		natsgo.ReconnectBufSize(-1),
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
	nc, err := natsgo.Connect(strings.Join(cfg.Servers, ","), opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS %s: %w", strings.Join(cfg.Servers, ","), err)
	}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(cfg.MaxPending),
		jetstream.WithPublishAsyncTimeout(cfg.Timeout),
	)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("open JetStream: %w", err)
	}
	return &Publisher{cfg: cfg, nc: nc, js: js}, nil
}

// Publish sends the whole batch, then waits for every acknowledgement. A
// Duplicate acknowledgement counts as delivered: the stream holds the event.
func (p *Publisher) Publish(ctx context.Context, batch []outbox.Event) []error {
	if !p.nc.IsConnected() {
		return publisher.Fill(len(batch), publisher.Unavailable(fmt.Errorf("nats: not connected (status %s)", p.nc.Status())))
	}
	errs := make([]error, len(batch))
	futures := make([]jetstream.PubAckFuture, len(batch))
	// What a stream lookup found, per subject: a batch for a missing stream
	// asks JetStream once, not once per event.
	verdicts := map[string]error{}
	for i := range batch {
		msg, err := p.message(&batch[i])
		if err != nil {
			errs[i] = publisher.Permanent(err)
			continue
		}
		futures[i], err = p.js.PublishMsgAsync(msg)
		if err != nil {
			errs[i] = p.classify(ctx, msg.Subject, err, verdicts)
		}
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			errs[i] = p.classify(ctx, f.Msg().Subject, err, verdicts)
		case <-ctx.Done():
			errs[i] = publisher.Unavailable(fmt.Errorf("nats: waiting for ack: %w", ctx.Err()))
		}
	}
	return errs
}

// message builds the JetStream message for e, or says why it cannot exist.
func (p *Publisher) message(e *outbox.Event) (*natsgo.Msg, error) {
	subject := p.cfg.SubjectPrefix + e.Type
	if err := validSubject(subject); err != nil {
		return nil, err
	}
	headers, err := outbox.ParseHeaders(e.Headers)
	if err != nil {
		return nil, err
	}
	h := make(natsgo.Header, len(headers)+3)
	for k, v := range headers {
		if reservedHeader(k) {
			continue
		}
		if err := validHeader(k, v); err != nil {
			return nil, err
		}
		h[k] = []string{v}
	}
	id := e.ID.String()
	// Nats-Msg-Id set here rather than through a publish option: the
	// stream drops a copy it has seen within its duplicate window.
	h[jetstream.MsgIDHeader] = []string{id}
	h[outbox.HeaderEventID] = []string{id}
	h[outbox.HeaderEventType] = []string{e.Type}
	if e.PartitionKey != "" {
		h[outbox.HeaderPartitionKey] = []string{e.PartitionKey}
	}
	return &natsgo.Msg{Subject: subject, Header: h, Data: e.Payload}, nil
}

// validSubject accepts what a JetStream publish can go to: dot-separated
// non-empty tokens, no wildcards, no white space.
func validSubject(s string) error {
	if s == "" {
		return fmt.Errorf("invalid subject: event_type is empty")
	}
	for _, tok := range strings.Split(s, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n\x00") {
			return fmt.Errorf("invalid subject %q: NATS subjects are dot-separated tokens without wildcards or white space", s)
		}
	}
	return nil
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

func validHeader(k, v string) error {
	if k == "" || strings.ContainsAny(k, ": \t\r\n") {
		return fmt.Errorf("header %q: invalid NATS header name", k)
	}
	if strings.ContainsAny(v, "\r\n") {
		return fmt.Errorf("header %q: value contains a line break", k)
	}
	return nil
}

// classify sorts a publish error into permanent (the event can never be
// stored), unavailable (the broker cannot take anything now) or retryable.
// verdicts caches stream lookups for the batch by subject.
func (p *Publisher) classify(ctx context.Context, subject string, err error, verdicts map[string]error) error {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, natsgo.ErrMaxPayload):
		return publisher.Permanent(fmt.Errorf("message too large for the NATS server's max_payload (%d bytes): %w", p.nc.MaxPayload(), err))
	case errors.Is(err, jetstream.ErrStreamMessageExceedsMaximum):
		return publisher.Permanent(fmt.Errorf("message too large for the stream's max_msg_size: %w", err))
	case errors.Is(err, natsgo.ErrBadSubject):
		return publisher.Permanent(fmt.Errorf("invalid subject %q: %w", subject, err))
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, natsgo.ErrNoResponders):
		if v, ok := verdicts[subject]; ok {
			return v
		}
		v := p.noResponders(ctx, subject, err)
		verdicts[subject] = v
		return v
	case errors.As(err, &apiErr):
		// A stream at its limits with the discard-new policy answers 503
		// with this code. Only the events for that stream are stuck, so
		// they retry with backoff while the others keep flowing.
		if apiErr.ErrorCode == errCodeStreamStoreFailed {
			return fmt.Errorf("stream refused the message: %w", err)
		}
		if apiErr.ErrorCode == jetstream.JSErrCodeJetStreamNotEnabled ||
			apiErr.ErrorCode == jetstream.JSErrCodeJetStreamNotEnabledForAccount || apiErr.Code >= 500 {
			return publisher.Unavailable(err)
		}
		return fmt.Errorf("jetstream rejected the message: %w", err)
	case errors.Is(err, jetstream.ErrAsyncPublishTimeout), errors.Is(err, natsgo.ErrTimeout),
		errors.Is(err, natsgo.ErrDisconnected), errors.Is(err, natsgo.ErrConnectionClosed),
		errors.Is(err, natsgo.ErrReconnectBufExceeded), errors.Is(err, jetstream.ErrTooManyStalledMsgs),
		errors.Is(err, natsgo.ErrNoServers), errors.Is(err, natsgo.ErrConnectionDraining),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return publisher.Unavailable(fmt.Errorf("nats: %w", err))
	}
	if !p.nc.IsConnected() {
		// Whatever the error says, a lost connection is to blame.
		return publisher.Unavailable(fmt.Errorf("nats: connection lost: %w", err))
	}
	return err
}

// noResponders tells a subject no stream listens on (permanent) from a
// JetStream that is not answering at all (unavailable).
func (p *Publisher) noResponders(ctx context.Context, subject string, err error) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	_, lookupErr := p.js.StreamNameBySubject(ctx, subject)
	if errors.Is(lookupErr, jetstream.ErrStreamNotFound) {
		return publisher.Permanent(fmt.Errorf("no JetStream stream captures subject %q; create one (nats stream add --subjects %q) or fix the event type or subject_prefix", subject, subject))
	}
	if lookupErr != nil {
		return publisher.Unavailable(fmt.Errorf("nats: no response from JetStream for %q: %w", subject, err))
	}
	// The stream exists but does not answer (no leader, or restarting):
	// nothing sent to it can succeed now, so the relay pauses rather than
	// spending the events' attempts.
	return publisher.Unavailable(fmt.Errorf("nats: no response from stream for %q: %w", subject, err))
}

// Ping checks that the connection is up and JetStream answers.
func (p *Publisher) Ping(ctx context.Context) error {
	if !p.nc.IsConnected() {
		if err := p.nc.LastError(); err != nil {
			return fmt.Errorf("nats: not connected: %w", err)
		}
		return fmt.Errorf("nats: not connected (status %s)", p.nc.Status())
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	if _, err := p.js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("nats: JetStream does not answer: %w", err)
	}
	return nil
}

// Close closes the connection. Publish has already awaited or given up on
// every acknowledgement, so nothing is waited for. Calling it again does
// nothing.
func (p *Publisher) Close(context.Context) error {
	p.closeOnce.Do(p.nc.Close)
	return nil
}
