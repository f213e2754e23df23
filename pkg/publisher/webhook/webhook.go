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
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/cloudevents"
)

func init() {
	publisher.RegisterConfig(ParseURL, Open, "http", "https")
	publisher.RegisterOptions(Options, "http", "https")
	// What people call the driver, for the unknown scheme's did-you-mean.
	publisher.Alias("webhook", "https")
	publisher.Alias("webhooks", "https")
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

// Response bodies: the start of an error's body goes into the event's
// last_error; the rest is read up to drainLimit so the connection can be
// used again.
const (
	excerptBytes = 1000
	drainLimit   = 64 << 10
)

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
