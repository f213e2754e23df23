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

	"github.com/outbox-relay/relay/pkg/redact"
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
}

// NewRegistry returns an empty registry for drivers of the named kind.
func NewRegistry[D any](kind string) *Registry[D] {
	return &Registry[D]{kind: kind, drivers: map[string]D{}}
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
		return zero, nil, fmt.Errorf("unknown %s scheme %q in %q: supported are %s (forgotten driver import?)",
			r.kind, u.Scheme, redact.URL(rawURL), strings.Join(r.Schemes(), ", "))
	}
	return d, u, nil
}
