// Package webhook delivers events to an HTTP endpoint: one POST per event,
// the payload as the body, signed per the Standard Webhooks scheme
// (webhook-id, webhook-timestamp, webhook-signature), so that receivers can
// verify it with any Standard Webhooks library. `{event_type}` and
// `{partition_key}` in the URL's path route each event.
//
// A batch is sent with many requests in flight, while the events of one
// partition key go one after another in batch order: the next leaves only
// once the endpoint accepted the one before. The answer decides each
// event's fate: 2xx delivered; 408, 425, 429 and 5xx retried (honouring
// Retry-After); redirects and other 4xx permanent; no answer at all
// (refused, DNS, TLS, timeout) means the endpoint is down, not the event.
//
// Register it by importing the package; it serves http:// and https://
// URLs.
package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/outbox-relay/relay/internal/redact"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/cloudevents"
	"github.com/outbox-relay/relay/pkg/publisher/option"
)

func init() {
	publisher.RegisterConfig(ParseURL, Open, "http", "https")
	publisher.RegisterOptions(Options, "http", "https")
	// What people call the driver, for the unknown scheme's did-you-mean.
	publisher.Alias("webhook", "https")
	publisher.Alias("webhooks", "https")
}

// Defaults for the URL options.
const (
	// TimeoutDefault bounds each request, from dialling to the end of the
	// answer.
	TimeoutDefault = 10 * time.Second
	// ConcurrencyDefault is the most requests in flight at once. At 5 ms a
	// request it allows some 12,000 events/s; a slower endpoint needs more.
	ConcurrencyDefault = 64
	// ContentTypeDefault is the Content-Type of an event whose row has no
	// content-type header.
	ContentTypeDefault = "application/octet-stream"
	// UserAgentDefault is sent unless a header option sets User-Agent.
	UserAgentDefault = "outbox-relay"
)

// concurrencyMax keeps a typo from opening thousands of connections.
const concurrencyMax = 4096

// minKeyBytes is the shortest signing key accepted. Standard Webhooks
// secrets are usually 24 to 64 random bytes; 16 is the least that still
// makes guessing hopeless.
const minKeyBytes = 16

// secretPrefix starts every Standard Webhooks secret.
const secretPrefix = "whsec_"

// Standard Webhooks header names.
const (
	headerWebhookID        = "Webhook-Id"
	headerWebhookTimestamp = "Webhook-Timestamp"
	headerWebhookSignature = "Webhook-Signature"
)

// Placeholders in the URL's path.
const (
	placeholderType = "{event_type}"
	placeholderKey  = "{partition_key}"
)

// cePrefix starts the header of each CloudEvents attribute (HTTP binding).
const cePrefix = "ce-"

// Config is a parsed http:// or https:// URL. Zero fields take their
// defaults in Open.
type Config struct {
	// Scheme is http or https.
	Scheme string
	// Host is the URL's host[:port].
	Host string
	// User is the URL's user info, sent as HTTP Basic authentication. Its
	// password is never logged.
	User *url.Userinfo
	// Path is the endpoint's path as sent (percent-encoded), where
	// {event_type} and {partition_key} stand for the event's, path-escaped.
	Path string
	// Query is the endpoint's own query string (encoded, without '?'),
	// from the query options; the driver's options never reach it.
	Query string
	// Timeout bounds each request and the health check.
	Timeout time.Duration
	// Concurrency is the most requests in flight at once, over all batches.
	Concurrency int
	// MaxIdleConns is how many idle keep-alive connections are kept;
	// fewer than Concurrency makes HTTP/1.1 connections churn.
	MaxIdleConns int
	// Headers are sent with every event; a row header of the same name is
	// left out, as a row's Authorization is when User is set.
	Headers http.Header
	// ContentType is sent for events whose row has no content-type header.
	ContentType string
	// SecretFile and SecretEnv name where the signing secret is read from
	// (one of them, unless Unsigned): a file, or an environment variable
	// looked up through publisher.LookupEnv.
	SecretFile, SecretEnv string
	// Unsigned sends requests without webhook-signature.
	Unsigned bool
	// H2C speaks HTTP/2 without TLS (prior knowledge) to an http:// URL.
	H2C bool
	// TLS are the https:// URL's tls_ca, tls_cert, tls_key, tls_insecure.
	TLS publisher.TLSFiles
	// CloudEvents are the format and ce_source options: with
	// format=cloudevents the attributes go in ce- headers (HTTP binding,
	// binary content mode) instead of X-Event-*.
	CloudEvents cloudevents.Config
}

// placeholder finds {name} in a path, written plainly or percent-encoded.
var placeholder = regexp.MustCompile(`(?i)(?:\{|%7B)([^{}%/]*)(?:\}|%7D)`)

// ParseURL reads the endpoint and the driver's options from u: timeout,
// concurrency, max_idle_conns, header (repeatable, Name:Value), query
// (repeatable, name=value), content_type, secret_file, secret_env,
// unsigned, h2c, tls_ca, tls_cert, tls_key, tls_insecure, format, ce_source.
// It reads no file.
func ParseURL(u *url.URL) (Config, error) {
	cfg := Config{
		Scheme:      strings.ToLower(u.Scheme),
		Timeout:     TimeoutDefault,
		Concurrency: ConcurrencyDefault,
		ContentType: ContentTypeDefault,
		Headers:     http.Header{},
	}
	if u.Host == "" || u.Opaque != "" {
		return cfg, fmt.Errorf("webhook URL %q has no host: want %s://host:port/path", u.Redacted(), u.Scheme)
	}
	if u.Fragment != "" {
		return cfg, errors.New("webhook URL: '#' ends the URL there and is never sent; percent-encode it as %23 where it belongs to a value")
	}
	cfg.Host, cfg.User = u.Host, u.User
	path, err := pathTemplate(u)
	if err != nil {
		return cfg, fmt.Errorf("webhook URL: %w", err)
	}
	cfg.Path = path

	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return cfg, fmt.Errorf("webhook URL: options: %w", err)
	}
	if q.Has("secret") {
		return cfg, errors.New("webhook URL: secret= would put the signing secret in a URL, which is logged; use secret_file=PATH or secret_env=NAME")
	}
	v, err := Options.Parse(q)
	if err != nil {
		return cfg, err
	}
	cfg.Timeout = optTimeout.Get(v)
	cfg.Concurrency = int(optConcurrency.Get(v))
	cfg.MaxIdleConns = cfg.Concurrency
	if n, ok := optMaxIdleConns.Lookup(v); ok {
		cfg.MaxIdleConns = int(n)
	}
	for i, h := range optHeader.All(v) {
		name, value, err := staticHeader(h)
		if err != nil {
			return cfg, fmt.Errorf("webhook URL: header option %d: %w", i+1, err)
		}
		cfg.Headers.Add(name, value)
	}
	cfg.CloudEvents = optCloudEvents.Get(v)
	if cfg.CloudEvents.Enabled {
		for name := range cfg.Headers {
			if cloudevents.IsRelayAttribute(cePrefix, name) {
				return cfg, fmt.Errorf("webhook URL: header %q: with format=cloudevents the relay sets it", name)
			}
		}
	}
	if cfg.User != nil && cfg.Headers.Get("Authorization") != "" {
		return cfg, errors.New("webhook URL: user info and header=Authorization:… both authenticate; keep one")
	}
	var params []string
	for i, kv := range optQuery.All(v) {
		name, value, _ := strings.Cut(kv, "=")
		if name == "" {
			return cfg, fmt.Errorf("webhook URL: query option %d has no name: want query=name=value", i+1)
		}
		params = append(params, url.QueryEscape(name)+"="+url.QueryEscape(value))
	}
	cfg.Query = strings.Join(params, "&")
	cfg.ContentType = optContentType.Get(v)
	cfg.Unsigned, cfg.H2C = optUnsigned.Get(v), optH2C.Get(v)
	secret := optSecret.Get(v)
	cfg.SecretFile, cfg.SecretEnv = secret.File, secret.Env
	switch {
	case cfg.Unsigned && !secret.IsZero():
		return cfg, errors.New("webhook URL: unsigned=true contradicts secret_file/secret_env; keep one")
	case !cfg.Unsigned && secret.IsZero():
		return cfg, errors.New("webhook URL: no signing secret: add secret_file=PATH or secret_env=NAME (a Standard Webhooks whsec_… secret), or unsigned=true to send requests receivers cannot verify")
	}
	cfg.TLS = optTLS.Get(v)
	switch {
	case cfg.Scheme == "http" && !cfg.TLS.IsZero():
		return cfg, errors.New("webhook URL: tls_* options need an https:// URL")
	case cfg.Scheme == "https" && cfg.H2C:
		return cfg, errors.New("webhook URL: h2c=true is HTTP/2 without TLS, for http:// URLs; https:// speaks HTTP/2 on its own")
	}
	return cfg, nil
}

// Options are the driver's URL options, declared once: ParseURL reads
// them, and docs/brokers.md lists them as Options.Table writes them (a
// test holds the two together). header= and query= are secret: they
// often carry an endpoint's API key.
var Options = option.New("webhook").UnknownHint("(the endpoint's own query parameters go in query=name=value)")

var (
	optSecret = Options.SecretSource("secret", "signing secret",
		"File holding the signing secret, a Standard Webhooks `whsec_<base64>` secret of at least 16 bytes (32 recommended). Several secrets separated by white space each sign every request (for rotation). Read once, at start.",
		"Name of a variable in the relay's environment holding the secret, as `secret_file` holds it. This is the only variable a driver reads, and only because the URL names it.")
	optUnsigned = Options.Bool("unsigned", false,
		"`true` sends no `webhook-signature`. One of `secret_file`, `secret_env` or `unsigned=true` is required.")
	optTimeout = Options.Duration("timeout", TimeoutDefault,
		"Bounds each request: connecting, TLS, sending, and the whole answer. An endpoint that has not answered by then is counted as down. Also bounds the health check.")
	optConcurrency = Options.Int("concurrency", ConcurrencyDefault,
		"Most requests in flight at once, over all batches (1–4096). Events of one partition key still go one after another.").
		Max(concurrencyMax).Want(fmt.Sprintf("a number from 1 to %d", concurrencyMax))
	optMaxIdleConns = Options.Int("max_idle_conns", ConcurrencyDefault,
		"Idle keep-alive connections kept for the next requests; fewer than `concurrency` makes HTTP/1.1 connections churn.").
		Max(concurrencyMax).Want(fmt.Sprintf("a number from 1 to %d", concurrencyMax)).DocDefault("`concurrency`")
	optHeader = Options.String("header", "",
		"`Name:Value`, repeatable: sent with every event, and wins over a row header of the same name. Not `Content-Type` (see `content_type`), not a connection or framing header, not `webhook-*` or `X-Event-*`.").
		Repeatable().Secret()
	optQuery = Options.String("query", "",
		"`name=value`, repeatable: the endpoint's own query string.").
		Repeatable().Secret()
	optContentType = Options.String("content_type", ContentTypeDefault,
		"`Content-Type` of events whose row has no `content-type` header.").
		CheckEmpty().Check(func(v string) error {
		if v == "" || validValue(v) != nil {
			return errors.New("is not a media type such as application/json")
		}
		return nil
	})
	optH2C = Options.Bool("h2c", false,
		"`true` speaks HTTP/2 without TLS (prior knowledge) to an `http://` endpoint that supports it.")
	optTLS = Options.TLS(option.TLSDocs{
		CA:       "CA certificate file for verifying the endpoint (`https://` only; the system roots otherwise).",
		Insecure: "`true` skips verifying the endpoint's certificate (tests only).",
	})
	optCloudEvents = cloudevents.Declare(Options,
		"`format=cloudevents` sends [CloudEvents](#cloudevents--formatcloudevents) in binary mode (HTTP binding): the attributes in `ce-` headers, percent-encoded, `datacontenttype` in `Content-Type`. `ce_source` sets their `source`.")
)

// pathTemplate returns u's path as it will be sent, percent-encoded as the
// user wrote it, with the known placeholders in plain braces. An unknown
// placeholder is a mistake ({eventType}) that must not reach the endpoint.
func pathTemplate(u *url.URL) (string, error) {
	path := u.RawPath // what was written, when Go's own encoding differs
	if path == "" {
		path = u.EscapedPath()
	}
	var bad error
	path = placeholder.ReplaceAllStringFunc(path, func(m string) string {
		name := placeholder.FindStringSubmatch(m)[1]
		if name != "event_type" && name != "partition_key" {
			bad = fmt.Errorf("path placeholder {%s} is unknown: use {event_type} or {partition_key}", name)
		}
		return "{" + name + "}"
	})
	if bad != nil {
		return "", bad
	}
	rest := strings.NewReplacer(placeholderType, "", placeholderKey, "").Replace(path)
	for i := 0; i < len(rest); i++ {
		if c := rest[i]; !pathChar(c) {
			return "", fmt.Errorf("path contains %q: percent-encode it", c)
		}
	}
	if path == "" {
		path = "/"
	}
	return path, nil
}

// pathChar reports whether c may appear in a percent-encoded path (RFC
// 3986 pchar, '/' and the '%' of an escape).
func pathChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		strings.IndexByte("-._~!$&'()*+,;=:@/%", c) >= 0
}

// staticHeader parses a header option. Its errors never quote the value,
// which may be a credential.
func staticHeader(opt string) (name, value string, err error) {
	name, value, ok := strings.Cut(opt, ":")
	if !ok {
		return "", "", errors.New("want header=Name:Value")
	}
	value = strings.TrimLeft(value, " \t")
	if err := validName(name); err != nil {
		return "", "", fmt.Errorf("header %q: %w", name, err)
	}
	if err := validValue(value); err != nil {
		return "", "", fmt.Errorf("header %q: %w", name, err)
	}
	switch {
	case strings.EqualFold(name, "Content-Type"):
		return "", "", errors.New("set the Content-Type of events without one with content_type=, not header=")
	case reservedHeader(name), outbox.IsEventHeader(name), webhookHeader(name):
		return "", "", fmt.Errorf("header %q: the relay or the HTTP client sets it", name)
	}
	return name, value, nil
}

// Open prepares a publisher: it reads the signing secret and the TLS files
// but does not connect, so an endpoint that is down is not an error here.
// ctx gives the environment secret_env is looked up in (publisher.WithEnv).
func Open(ctx context.Context, cfg Config) (*Publisher, error) {
	cfg = cfg.withDefaults()
	keys, err := signingKeys(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("webhook URL: %w", err)
	}
	tr := &http.Transport{
		// No proxy: drivers read no environment, HTTPS_PROXY included.
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   cfg.Timeout,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          cfg.MaxIdleConns,
		MaxIdleConnsPerHost:   cfg.MaxIdleConns,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true, // only error bodies are read, and only their start
		ExpectContinueTimeout: time.Second,
		// A silent HTTP/2 connection carries every request; ping it so a
		// dead one is replaced instead of timing out request after request.
		HTTP2: &http.HTTP2Config{SendPingTimeout: 15 * time.Second, PingTimeout: cfg.Timeout},
	}
	if cfg.Scheme == "https" {
		if tr.TLSClientConfig, err = cfg.TLS.Config(); err != nil {
			return nil, fmt.Errorf("webhook URL: %w", err)
		}
	}
	if cfg.H2C {
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	origin := cfg.Scheme + "://" + cfg.Host
	p := &Publisher{
		cfg:    cfg,
		keys:   keys,
		tr:     tr,
		client: &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		origin: origin,
		ce:     cfg.CloudEvents.Mapper(ctx),
		sem:    make(chan struct{}, cfg.Concurrency),
	}
	if cfg.Query != "" {
		p.query = "?" + cfg.Query
	}
	pingPath, _, _ := strings.Cut(cfg.Path, "{")
	p.pingURL = origin + pingPath + p.query
	p.templated = strings.Contains(cfg.Path, "{")
	return p, nil
}

// withDefaults gives zero fields their default, for a Config built by hand.
func (c Config) withDefaults() Config {
	if c.Timeout <= 0 {
		c.Timeout = TimeoutDefault
	}
	if c.Concurrency <= 0 {
		c.Concurrency = ConcurrencyDefault
	}
	if c.MaxIdleConns <= 0 {
		c.MaxIdleConns = c.Concurrency
	}
	if c.ContentType == "" {
		c.ContentType = ContentTypeDefault
	}
	if c.Path == "" {
		c.Path = "/"
	}
	return c
}

// signingKeys reads the whsec_ secrets, whitespace-separated: while a
// secret is being rotated, requests carry a signature for each. Its errors
// never quote the secret.
func signingKeys(ctx context.Context, cfg Config) ([][]byte, error) {
	if cfg.Unsigned {
		return nil, nil
	}
	ref := option.SecretRef{File: cfg.SecretFile, Env: cfg.SecretEnv}
	text, source, err := ref.Read(func(name string) (string, bool, error) { return publisher.LookupEnv(ctx, name) })
	if err != nil {
		return nil, err
	}
	secrets := strings.Fields(text)
	if len(secrets) == 0 {
		return nil, fmt.Errorf("%s holds no secret", source)
	}
	keys := make([][]byte, len(secrets))
	for i, s := range secrets {
		b64, ok := strings.CutPrefix(s, secretPrefix)
		if !ok {
			return nil, fmt.Errorf("%s: secret %d does not start with %s: want a Standard Webhooks secret, whsec_ and base64 (make one with: echo whsec_$(head -c 32 /dev/urandom | base64))", source, i+1, secretPrefix)
		}
		key, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			key, err = base64.RawStdEncoding.DecodeString(b64)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: secret %d: the part after %s is not base64", source, i+1, secretPrefix)
		}
		if len(key) < minKeyBytes {
			return nil, fmt.Errorf("%s: secret %d is a %d-byte key; use at least %d random bytes (32 recommended)", source, i+1, len(key), minKeyBytes)
		}
		keys[i] = key
	}
	return keys, nil
}

// errClosed is what a closed publisher answers.
var errClosed = errors.New("webhook: publisher is closed")

// Publisher posts events to one endpoint over a pool of keep-alive
// connections, shared by concurrent Publish calls.
type Publisher struct {
	cfg    Config
	keys   [][]byte // nil: unsigned
	tr     *http.Transport
	client *http.Client
	origin string // scheme://host[:port]: what errors name, never the path
	query  string // "?" and the endpoint's own query, or ""
	// pingURL is the path up to its first placeholder.
	pingURL   string
	templated bool
	// ce maps events to CloudEvents attributes; nil sends X-Event-*.
	ce *cloudevents.Mapper
	// sem holds a token per request in flight, over all batches.
	sem    chan struct{}
	closed atomic.Bool
}

// Publish sends every event of the batch, up to Concurrency at once. The
// events of a partition key form a chain, sent one after another; a chain
// stops at an event that is not delivered, except a permanently refused
// one, which never arrives and so cannot be overtaken. Once the endpoint
// is found down, nothing more of the batch is sent.
func (p *Publisher) Publish(ctx context.Context, batch []outbox.Event) []error {
	if p.closed.Load() {
		return publisher.Fill(len(batch), publisher.Unavailable(errClosed))
	}
	errs := make([]error, len(batch))
	chains := chainsOf(batch)
	var (
		next atomic.Int64
		down atomic.Pointer[error] // the first unavailable error
		wg   sync.WaitGroup
	)
	for range min(p.cfg.Concurrency, len(chains)) {
		wg.Go(func() {
			for {
				c := int(next.Add(1)) - 1
				if c >= len(chains) {
					return
				}
				p.sendChain(ctx, batch, chains[c], errs, &down)
			}
		})
	}
	wg.Wait()
	return errs
}

// chainsOf groups a batch's indexes by partition key, in batch order; an
// event without a key is a chain of its own.
func chainsOf(batch []outbox.Event) [][]int {
	chains := make([][]int, 0, len(batch))
	byKey := map[string]int{}
	for i := range batch {
		k := batch[i].PartitionKey
		if k == "" {
			chains = append(chains, []int{i})
			continue
		}
		if c, ok := byKey[k]; ok {
			chains[c] = append(chains[c], i)
			continue
		}
		byKey[k] = len(chains)
		chains = append(chains, []int{i})
	}
	return chains
}

func (p *Publisher) sendChain(ctx context.Context, batch []outbox.Event, chain []int, errs []error, down *atomic.Pointer[error]) {
	var blocker error // why the rest of the chain is held back
	var blockedBy int
	for _, i := range chain {
		switch {
		case blocker != nil:
			// Retryable, not released: the engine counts an attempt and
			// backs off, which keeps a key whose head keeps failing from
			// spinning. The failure's Retry-After travels along.
			errs[i] = fmt.Errorf("webhook: not sent: event %s of partition key %q was not delivered before it: %w",
				batch[blockedBy].ID, batch[i].PartitionKey, blocker)
			continue
		case down.Load() != nil:
			errs[i] = *down.Load()
			continue
		}
		err := p.acquireAndSend(ctx, &batch[i], down)
		errs[i] = err
		switch {
		case err == nil, publisher.IsPermanent(err):
		case publisher.IsUnavailable(err):
			down.CompareAndSwap(nil, &err)
		default:
			blocker, blockedBy = err, i
		}
	}
}

// acquireAndSend waits for a request slot, then sends e unless the endpoint
// was found down meanwhile.
func (p *Publisher) acquireAndSend(ctx context.Context, e *outbox.Event, down *atomic.Pointer[error]) error {
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return publisher.Unavailable(fmt.Errorf("webhook: not sent: %w", ctx.Err()))
	}
	defer func() { <-p.sem }()
	if err := down.Load(); err != nil {
		return *err
	}
	return p.send(ctx, e)
}

// send posts one event and classifies the answer.
func (p *Publisher) send(ctx context.Context, e *outbox.Event) error {
	if ctx.Err() != nil {
		return publisher.Unavailable(fmt.Errorf("webhook: not sent: %w", ctx.Err()))
	}
	header, err := p.header(e)
	if err != nil {
		return publisher.Permanent(err)
	}
	target, err := p.eventURL(e)
	if err != nil {
		return publisher.Permanent(err)
	}
	reqCtx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(reqCtx, http.MethodPost, target, bytes.NewReader(e.Payload))
	if err != nil {
		// The path was checked when the URL was parsed and the values are
		// escaped, so this is not the event's fault.
		return fmt.Errorf("webhook: build request: %w", err)
	}
	req.Header = header
	req.URL.User = p.cfg.User
	resp, err := p.client.Do(req)
	if err != nil {
		return p.noAnswer(ctx, err)
	}
	return p.outcome(resp)
}

// eventURL is the endpoint for e, with the placeholders filled in. It
// fails when the values make a path segment "." or "..": URL
// normalisation (RFC 3986 remove_dot_segments, done by proxies, servers
// and routers) drops such a segment, and ".." the one before it, so the
// request would reach another path than the one written. Path escaping
// leaves dots alone, and an escaped dot (%2E) is the same character to a
// normaliser.
func (p *Publisher) eventURL(e *outbox.Event) (string, error) {
	path := p.cfg.Path
	if p.templated {
		path = strings.ReplaceAll(path, placeholderType, url.PathEscape(e.Type))
		path = strings.ReplaceAll(path, placeholderKey, url.PathEscape(e.PartitionKey))
		if err := p.checkDotSegments(e, path); err != nil {
			return "", err
		}
	}
	return p.origin + path + p.query, nil
}

// checkDotSegments compares the filled path with the template segment by
// segment (escaped values hold no "/", so they line up): a "." or ".."
// segment the template did not have came from the event.
func (p *Publisher) checkDotSegments(e *outbox.Event, path string) error {
	tmpl := p.cfg.Path
	for {
		seg, rest, more := strings.Cut(path, "/")
		tseg, trest, _ := strings.Cut(tmpl, "/")
		if (seg == "." || seg == "..") && seg != tseg {
			var fields []string
			if strings.Contains(tseg, placeholderType) {
				fields = append(fields, fmt.Sprintf("event_type %q", publisher.Clip(e.Type)))
			}
			if strings.Contains(tseg, placeholderKey) {
				fields = append(fields, fmt.Sprintf("partition_key %q", publisher.Clip(e.PartitionKey)))
			}
			return fmt.Errorf("%s cannot fill the path segment %s: it would be %q, a dot segment that URL normalisation removes (RFC 3986), so the request would reach another path",
				strings.Join(fields, " and "), tseg, seg)
		}
		if !more {
			return nil
		}
		path, tmpl = rest, trest
	}
}

// header builds e's request headers: the static ones, the row's, then the
// relay's own, which no row can replace. It fails for a row header no HTTP
// request can carry.
func (p *Publisher) header(e *outbox.Event) (http.Header, error) {
	// The event's own fields travel as headers too; one with a line break
	// would make the HTTP client refuse the request, every time, and one
	// with white space around it would arrive trimmed. CloudEvents
	// attributes are percent-encoded, so only the spec's rules apply.
	if p.ce == nil {
		if err := validValue(e.Type); err != nil {
			return nil, fmt.Errorf("event_type %q cannot travel in the %s header: %w", publisher.Clip(e.Type), outbox.HeaderEventType, err)
		}
		if err := validValue(e.PartitionKey); err != nil {
			return nil, fmt.Errorf("partition_key %q cannot travel in the %s header: %w", publisher.Clip(e.PartitionKey), outbox.HeaderPartitionKey, err)
		}
	}
	rows, err := outbox.ParseHeaders(e.Headers)
	if err != nil {
		return nil, err
	}
	var attrs []cloudevents.Attribute
	if p.ce != nil {
		if attrs, err = p.ce.Attributes(e, rows); err != nil {
			return nil, err
		}
	}
	h := make(http.Header, len(p.cfg.Headers)+len(rows)+8)
	for k, v := range p.cfg.Headers {
		h[k] = v
	}
	contentType := p.cfg.ContentType
	// spelling maps each name sent, canonical, to the row's spelling of it.
	var spelling map[string]string
	// Sorted, so that the error for two spellings of one name is always
	// the same.
	for _, k := range slices.Sorted(maps.Keys(rows)) {
		v := rows[k]
		if outbox.IsEventHeader(k) || webhookHeader(k) || p.ce != nil && cloudevents.IsRelayAttribute(cePrefix, k) {
			continue // the relay's own win
		}
		if err := validName(k); err != nil {
			return nil, fmt.Errorf("header %q: %w", k, err)
		}
		if err := validValue(v); err != nil {
			return nil, fmt.Errorf("header %q: %w", k, err)
		}
		// HTTP names ignore letter case (RFC 9110): "Tenant" and "tenant"
		// are one field, and would arrive as one header with two values
		// where the row has two headers.
		name := http.CanonicalHeaderKey(k)
		if other, dup := spelling[name]; dup {
			return nil, fmt.Errorf("headers %q and %q: HTTP header names ignore letter case, so the two would arrive as one header with two values; rename one", other, k)
		}
		if spelling == nil {
			spelling = make(map[string]string, len(rows))
		}
		spelling[name] = k
		switch {
		case reservedHeader(k):
			return nil, fmt.Errorf("header %q: the HTTP client sets it (RFC 9110 connection and framing header); rename it", k)
		case strings.EqualFold(k, "Content-Type"):
			contentType = v
			continue
		}
		if _, static := p.cfg.Headers[name]; static {
			continue
		}
		if name == "Authorization" && p.cfg.User != nil {
			continue // the URL's credentials, like a header option, win
		}
		h[name] = append(h[name], v)
	}
	id := e.ID.String()
	h["Content-Type"] = []string{contentType}
	if _, ok := h["User-Agent"]; !ok {
		h["User-Agent"] = []string{UserAgentDefault}
	}
	if p.ce == nil {
		h[outbox.HeaderEventID] = []string{id}
		h[outbox.HeaderEventType] = []string{e.Type}
		if e.PartitionKey != "" {
			h[outbox.HeaderPartitionKey] = []string{e.PartitionKey}
		}
	}
	for _, a := range attrs {
		if a.Name == cloudevents.AttrDataContentType {
			continue // Content-Type carries it, as the binding says
		}
		h[http.CanonicalHeaderKey(cePrefix+a.Name)] = []string{cloudevents.PercentEncode(a.Value)}
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	h[headerWebhookID] = []string{id}
	h[headerWebhookTimestamp] = []string{ts}
	if len(p.keys) > 0 {
		h[headerWebhookSignature] = []string{p.sign(id, ts, e.Payload)}
	}
	return h, nil
}

// sign returns the webhook-signature value: "v1,<base64 HMAC-SHA256 of
// id.timestamp.body>" per key, space-separated.
func (p *Publisher) sign(id, ts string, body []byte) string {
	sigs := make([]string, len(p.keys))
	for i, key := range p.keys {
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(id))
		mac.Write([]byte{'.'})
		mac.Write([]byte(ts))
		mac.Write([]byte{'.'})
		mac.Write(body)
		sigs[i] = "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	}
	return strings.Join(sigs, " ")
}

// validName checks a header name against RFC 9110's token rule.
func validName(name string) error {
	if name == "" {
		return errors.New("empty header name")
	}
	for i := 0; i < len(name); i++ {
		if !tokenChar(name[i]) {
			return errors.New("name is not an HTTP token (RFC 9110 allows letters, digits and !#$%&'*+-.^_`|~)")
		}
	}
	return nil
}

// tokenChar reports whether c is an RFC 9110 tchar.
func tokenChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// validValue checks a header value against RFC 9110's field-value rule:
// visible characters, spaces and tabs, no line break or other control, and
// no white space at either end, which is not part of the value: Go's client
// trims it on HTTP/1.1 and receivers and proxies strip it on any version
// (publisher.CheckHeaderLine, the rule NATS shares).
func validValue(v string) error {
	if err := publisher.CheckHeaderLine(v); err != nil {
		return err
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return errors.New("value contains a control character (RFC 9110 allows visible characters, spaces and tabs in HTTP header values)")
		}
	}
	return nil
}

// reservedHeader reports the headers that belong to the HTTP connection
// or message framing: the client sets them, HTTP/2 forbids most, and a
// row's "Connection: close" or "Content-Length" would break the exchange.
func reservedHeader(name string) bool {
	switch strings.ToLower(name) {
	case "host", "content-length", "transfer-encoding", "connection", "keep-alive",
		"proxy-connection", "upgrade", "te", "trailer", "expect":
		return true
	}
	return false
}

// webhookHeader reports the Standard Webhooks headers the relay sets.
func webhookHeader(name string) bool {
	return strings.EqualFold(name, headerWebhookID) || strings.EqualFold(name, headerWebhookTimestamp) ||
		strings.EqualFold(name, headerWebhookSignature)
}

// noAnswer classifies a request that got no HTTP answer: refused, DNS,
// TLS, a reset or a timeout. The endpoint, not the event, is at fault.
func (p *Publisher) noAnswer(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return publisher.Unavailable(fmt.Errorf("webhook: POST to %s cut off: %w", p.origin, ctx.Err()))
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // its text repeats the URL, whose path may hold a token
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return publisher.Unavailable(fmt.Errorf("webhook: POST to %s: no answer within %s (timeout): %w", p.origin, p.cfg.Timeout, err))
	case connectionDropped(err):
		// The endpoint took the connection and closed it under the
		// request: it may be this event that makes it fall over, which the
		// engine finds out by sending it alone.
		return publisher.Dropped(fmt.Errorf("webhook: POST to %s: the connection closed before an answer: %w", p.origin, err))
	}
	return publisher.Unavailable(fmt.Errorf("webhook: POST to %s: %w", p.origin, err))
}

// connectionDropped reports whether err is a connection closed under a
// request, as opposed to one that could not be made (refused, DNS, TLS) or
// an answer that did not come in time.
func connectionDropped(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return false
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		strings.Contains(err.Error(), "server closed idle connection")
}

// Response bodies: the start of an error's body goes into the event's
// last_error; the rest is read up to drainLimit so the connection can be
// used again.
const (
	excerptBytes = 200
	drainLimit   = 64 << 10
)

// outcome classifies an HTTP answer and consumes its body.
func (p *Publisher) outcome(resp *http.Response) error {
	defer func() {
		_, _ = io.CopyN(io.Discard, resp.Body, drainLimit)
		_ = resp.Body.Close()
	}()
	s := resp.StatusCode
	if s >= 200 && s < 300 {
		return nil
	}
	status := fmt.Sprintf("%d %s", s, http.StatusText(s))
	if s >= 300 && s < 400 {
		return publisher.Permanent(fmt.Errorf("webhook: %s answered %s, Location %s: redirects are not followed; point PUBLISHER_URL at the final address",
			p.origin, status, quoteExcerpt(redact.URL(resp.Header.Get("Location")))))
	}
	head, _ := io.ReadAll(io.LimitReader(resp.Body, excerptBytes+1))
	msg := fmt.Sprintf("webhook: %s answered %s", p.origin, status)
	if len(bytes.TrimSpace(head)) > 0 {
		msg += ": " + quoteExcerpt(string(head))
	}
	switch {
	case s == http.StatusRequestTimeout, s == http.StatusTooEarly, s == http.StatusTooManyRequests, s >= 500 && s < 600:
		if d, ok := retryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			return publisher.RetryAfter(fmt.Errorf("%s (Retry-After %s)", msg, d), d)
		}
		return errors.New(msg)
	case s >= 400 && s < 500:
		return publisher.Permanent(errors.New(msg))
	}
	// 1xx as a final answer, or beyond 599: nothing HTTP defines; try again.
	return errors.New(msg + " (not a status HTTP defines for an answer)")
}

// quoteExcerpt returns the start of s, at most excerptBytes, quoted so that
// control characters and invalid UTF-8 arrive escaped.
func quoteExcerpt(s string) string {
	if len(s) <= excerptBytes {
		return strconv.Quote(s)
	}
	cut := excerptBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "…"
}

// retryAfter parses a Retry-After value: delay-seconds or an HTTP date.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseUint(v, 10, 64); err == nil {
		const maxSeconds = 1 << 32 // far beyond any RETRY_MAX_DELAY, and no overflow
		return time.Duration(min(n, maxSeconds)) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0).Round(time.Second), true
	}
	return 0, false
}

// Ping sends HEAD to the URL's path up to its first placeholder. Any HTTP
// answer, whatever its status, means the endpoint is up, as in Publish,
// where only a request that gets no answer finds it down.
func (p *Publisher) Ping(ctx context.Context) error {
	if p.closed.Load() {
		return errClosed
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, p.pingURL, nil)
	if err != nil {
		return fmt.Errorf("webhook: build health check: %w", err)
	}
	for k, v := range p.cfg.Headers {
		req.Header[k] = v
	}
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header["User-Agent"] = []string{UserAgentDefault}
	}
	req.URL.User = p.cfg.User
	resp, err := p.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("webhook: health check HEAD %s: %w", p.origin, err)
	}
	_ = resp.Body.Close()
	return nil
}

// Close drops the idle connections. Publish has finished every request it
// started by the time it returns, so nothing is waited for. Calling it
// again does nothing.
func (p *Publisher) Close(context.Context) error {
	p.closed.Store(true)
	p.tr.CloseIdleConnections()
	return nil
}
