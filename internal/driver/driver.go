// Package driver maps URL schemes to the drivers a program imports, so that
// storage and publisher drivers are both chosen from a URL the same way and
// report an unknown scheme the same way.
package driver

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/outbox-relay/relay/internal/redact"
	"github.com/outbox-relay/relay/internal/spelling"
)

// Opener builds a T from a URL whose scheme it was registered for. Driver
// options come from the URL's query; drivers never read the environment.
type Opener[T any] func(ctx context.Context, u *url.URL) (T, error)

// Registry holds the drivers of one kind, D being whatever describes one:
// an Opener for publishers, a richer description for storages.
type Registry[D any] struct {
	kind    string // "storage", "publisher": used in error messages
	mu      sync.RWMutex
	drivers map[string]D
	// aliases map names people write for a broker or database
	// ("rabbitmq") to the scheme that serves it ("amqp"), for the
	// did-you-mean of an unknown scheme.
	aliases map[string]string
}

// NewRegistry returns an empty registry for drivers of the named kind.
func NewRegistry[D any](kind string) *Registry[D] {
	return &Registry[D]{kind: kind, drivers: map[string]D{}, aliases: map[string]string{}}
}

// Register makes d available under the given URL schemes. Driver packages
// call it from init, so a program supports the drivers it imports.
func (r *Registry[D]) Register(d D, schemes ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, scheme := range schemes {
		if _, dup := r.drivers[scheme]; dup {
			panic(fmt.Sprintf("%s driver registered twice for scheme %q", r.kind, scheme))
		}
		r.drivers[scheme] = d
	}
}

// Alias makes an unknown scheme name suggest scheme: drivers declare the
// names their broker or database goes by ("rabbitmq" for amqp), which no
// edit distance would find. An alias does not open anything: the URL must
// still be written with the real scheme.
func (r *Registry[D]) Alias(name, scheme string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.aliases[strings.ToLower(name)] = scheme
}

// Suggest returns the registered scheme an unknown one most likely meant,
// or "": a declared alias, the scheme before a '+' (golang-migrate's
// postgres+ssl, mysql+tcp), or a registered scheme a typing mistake or two
// away.
func (r *Registry[D]) Suggest(scheme string) string {
	scheme = strings.ToLower(scheme)
	r.mu.RLock()
	defer r.mu.RUnlock()
	if s, ok := r.aliases[scheme]; ok {
		return s
	}
	if base, _, ok := strings.Cut(scheme, "+"); ok {
		if _, ok := r.drivers[base]; ok {
			return base
		}
		if s, ok := r.aliases[base]; ok {
			return s
		}
		scheme = base
	}
	names := make([]string, 0, len(r.drivers))
	for s := range r.drivers {
		names = append(names, s)
	}
	slices.Sort(names) // the same answer every time when two are as close
	return spelling.Closest(scheme, names)
}

// Schemes lists the registered URL schemes, sorted.
func (r *Registry[D]) Schemes() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	schemes := make([]string, 0, len(r.drivers))
	for s := range r.drivers {
		schemes = append(schemes, s+"://")
	}
	slices.Sort(schemes)
	return schemes
}

// Lookup parses rawURL and returns the driver registered for its scheme.
// Its errors never contain the URL's password.
func (r *Registry[D]) Lookup(rawURL string) (D, *url.URL, error) {
	var zero D
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme == "" {
		return zero, nil, fmt.Errorf("malformed %s URL %q: expected scheme://host", r.kind, redact.URL(rawURL))
	}
	r.mu.RLock()
	d, ok := r.drivers[strings.ToLower(u.Scheme)]
	r.mu.RUnlock()
	if !ok {
		// No "forgotten driver import?": the binaries' users cannot add
		// one, and a Go program's author finds the schemes listed.
		if guess := r.Suggest(u.Scheme); guess != "" {
			return zero, nil, fmt.Errorf("unknown %s scheme %q in %q: did you mean %s://? Supported are %s",
				r.kind, u.Scheme, redact.URL(rawURL), guess, strings.Join(r.Schemes(), ", "))
		}
		return zero, nil, fmt.Errorf("unknown %s scheme %q in %q: supported are %s",
			r.kind, u.Scheme, redact.URL(rawURL), strings.Join(r.Schemes(), ", "))
	}
	return d, u, nil
}
