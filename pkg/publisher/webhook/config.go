// This file: the URL and its options, read into a Config.

package webhook

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/cloudevents"
	"github.com/outbox-relay/relay/pkg/publisher/option"
)

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

// Placeholders in the URL's path.
const (
	placeholderType = "{event_type}"
	placeholderKey  = "{partition_key}"
)

// placeholder finds {name} in a path, written plainly or percent-encoded.
var placeholder = regexp.MustCompile(`(?i)(?:\{|%7B)([^{}%/]*)(?:\}|%7D)`)

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
