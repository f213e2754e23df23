// Package publisher defines what the relay needs from a message broker: the
// Publisher interface, the error classes that decide an event's fate
// (Permanent, Unavailable, anything else retryable), and Open, which picks a
// registered driver from a URL's scheme.
package publisher

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/outbox-relay/relay/internal/redact"
	"github.com/outbox-relay/relay/internal/registry"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher/option"
)

// Publisher sends events to a broker.
type Publisher interface {
	// Publish sends the batch and returns one error per event, in batch
	// order; nil means the broker acknowledged that event. Events that share
	// a partition key reach the broker in batch order. Drivers pipeline the
	// batch (send all, then await the acknowledgements).
	Publish(ctx context.Context, batch []outbox.Event) []error
	// Ping reports whether the broker answers now.
	Ping(ctx context.Context) error
	// Close releases the connection. Calling it twice is harmless.
	Close(ctx context.Context) error
}

// permanentError marks an error that retrying cannot fix.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// unavailableError marks an error that says the broker, not the event, is
// the problem.
type unavailableError struct{ err error }

func (e unavailableError) Error() string { return e.err.Error() }
func (e unavailableError) Unwrap() error { return e.err }

// droppedError marks an unavailable error that came from the broker closing
// the connection while the event was in flight.
type droppedError struct{ err error }

func (e droppedError) Error() string { return e.err.Error() }
func (e droppedError) Unwrap() error { return unavailableError(e) }

// Dropped marks err as the broker (or the network) closing the connection
// while the event was in flight. It is Unavailable: the event is released
// and keeps its attempts. The engine also learns from it that the batch
// may hold an event the broker cannot stand: when the broker answers again
// at once, it sends the batch again in halves until such an event stands
// alone. Drivers use it only for a connection lost mid-publish, never for
// timeouts or refusals.
func Dropped(err error) error {
	if err == nil {
		return nil
	}
	return droppedError{err}
}

// IsDropped reports whether err, or an error it wraps, was marked Dropped.
func IsDropped(err error) bool {
	var d droppedError
	return errors.As(err, &d)
}

// Permanent marks err as one that will never succeed: the event goes DEAD at
// once with err as its last_error.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// Unavailable marks err as the broker being unreachable: the event is
// released without spending an attempt and the relay pauses claiming.
func Unavailable(err error) error {
	if err == nil {
		return nil
	}
	return unavailableError{err}
}

// retryAfterError carries how long the broker asked to be left alone before
// the event is tried again.
type retryAfterError struct {
	err   error
	delay time.Duration
}

func (e retryAfterError) Error() string { return e.err.Error() }
func (e retryAfterError) Unwrap() error { return e.err }

// RetryAfter attaches to a retryable err the least wait the broker asked
// for (an HTTP Retry-After, say). The engine waits the longer of that and
// its own backoff, capped at RETRY_MAX_DELAY. A negative d counts as zero.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return retryAfterError{err: err, delay: max(d, 0)}
}

// RetryDelay returns the wait RetryAfter attached to err or an error it
// wraps; ok is false when there is none.
func RetryDelay(err error) (d time.Duration, ok bool) {
	var r retryAfterError
	if errors.As(err, &r) {
		return r.delay, true
	}
	return 0, false
}

// IsPermanent reports whether err, or an error it wraps, was marked Permanent.
func IsPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}

// IsUnavailable reports whether err, or an error it wraps, was marked
// Unavailable.
func IsUnavailable(err error) bool {
	var u unavailableError
	return errors.As(err, &u)
}

// Fill returns a slice of n copies of err: the result of a batch that failed
// as a whole.
func Fill(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// envKey is the context key under which WithEnv stores a lookup.
type envKey struct{}

// WithEnv returns a context that lets the drivers opened with it look up
// environment variables through lookup. Drivers never read the environment
// on their own: only a variable an operator names in the URL (a secret's
// source, say) is looked up, and only in the environment the program hands
// over here; the relay hands over its own.
func WithEnv(ctx context.Context, lookup func(name string) (string, bool)) context.Context {
	return context.WithValue(ctx, envKey{}, lookup)
}

// LookupEnv looks name up in the environment WithEnv put in ctx. It reports
// an error when ctx carries none, naming the fix.
func LookupEnv(ctx context.Context, name string) (string, bool, error) {
	lookup, _ := ctx.Value(envKey{}).(func(string) (string, bool))
	if lookup == nil {
		return "", false, fmt.Errorf("no environment to read %s from: the program opening the publisher must pass one with publisher.WithEnv (the relay does)", name)
	}
	v, ok := lookup(name)
	return v, ok, nil
}

// tableKey is the context key under which WithTable stores a table name.
type tableKey struct{}

// WithTable returns a context that tells the drivers opened with it which
// outbox table their events come from (table or schema.table), for what
// names the events' origin: the CloudEvents source, say. The relay passes
// its own.
func WithTable(ctx context.Context, table string) context.Context {
	return context.WithValue(ctx, tableKey{}, table)
}

// Table returns the table WithTable put in ctx, or "" when it holds none.
func Table(ctx context.Context) string {
	t, _ := ctx.Value(tableKey{}).(string)
	return t
}

var drivers = registry.New[registry.Opener[Publisher]]("publisher")

// Register makes a driver available to Open under the given URL schemes;
// driver packages call it from init.
func Register(opener registry.Opener[Publisher], schemes ...string) {
	drivers.Register(opener, schemes...)
}

// Alias makes an unknown scheme name suggest the driver's scheme ("rabbitmq"
// → amqp) in the error that refuses it; driver packages call it from init.
func Alias(name, scheme string) { drivers.Alias(name, scheme) }

// RegisterConfig registers a driver in two steps under the given URL
// schemes: parse turns the URL into the driver's Config, reporting every
// mistake in it, and open makes the publisher from that Config.
func RegisterConfig[C any, P Publisher](parse func(*url.URL) (C, error), open func(context.Context, C) (P, error), schemes ...string) {
	Register(func(ctx context.Context, u *url.URL) (Publisher, error) {
		cfg, err := parse(u)
		if err != nil {
			return nil, err
		}
		p, err := open(ctx, cfg)
		if err != nil {
			return nil, err // not p: a nil *T in a Publisher is not a nil Publisher
		}
		return p, nil
	}, schemes...)
}

// Open connects the driver registered for rawURL's scheme.
func Open(ctx context.Context, rawURL string) (Publisher, error) {
	open, u, err := drivers.Lookup(rawURL)
	if err != nil {
		return nil, err
	}
	return open(ctx, u)
}

// Check reports whether rawURL names a registered driver, without connecting.
func Check(rawURL string) error {
	_, _, err := drivers.Lookup(rawURL)
	return err
}

// Clip shortens s, a subject, topic or header name taken from an event, for
// an error message: an event_type of kilobytes would bury the reason in
// last_error. It keeps the first 64 bytes, cut on a character boundary.
func Clip(s string) string {
	const keep = 64
	if len(s) <= keep {
		return s
	}
	cut := keep
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// declared holds each scheme's option declaration, for Redact.
var (
	declaredMu sync.RWMutex
	declared   = map[string]*option.Set{}
)

// RegisterOptions records the options a driver declares under its
// schemes, so that Redact masks the values the driver declares secret.
// Driver packages call it from init, next to Register.
func RegisterOptions(set *option.Set, schemes ...string) {
	declaredMu.Lock()
	defer declaredMu.Unlock()
	for _, s := range schemes {
		declared[strings.ToLower(s)] = set
	}
}

// Redact returns rawURL fit for a log line: the password and every option
// its driver declares secret masked, and redact.URL's patterns applied
// besides, for a scheme no driver registered.
func Redact(rawURL string) string {
	scheme, _, ok := strings.Cut(rawURL, "://")
	if !ok {
		return redact.URL(rawURL)
	}
	declaredMu.RLock()
	set := declared[strings.ToLower(scheme)]
	declaredMu.RUnlock()
	if set == nil {
		return redact.URL(rawURL)
	}
	return set.Redact(rawURL)
}
