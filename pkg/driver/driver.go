// Package driver maps URL schemes to the constructors of the drivers a
// program imports, so that storage and publisher drivers are both chosen from
// a URL the same way and report an unknown scheme the same way.
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

// Registry holds the openers of one kind of driver.
type Registry[T any] struct {
	kind    string // "storage", "publisher": used in error messages
	mu      sync.RWMutex
	openers map[string]Opener[T]
}

// NewRegistry returns an empty registry for drivers of the named kind.
func NewRegistry[T any](kind string) *Registry[T] {
	return &Registry[T]{kind: kind, openers: map[string]Opener[T]{}}
}

// Register makes opener available under the given URL schemes. Driver
// packages call it from init, so a program supports the drivers it imports.
func (r *Registry[T]) Register(opener Opener[T], schemes ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, scheme := range schemes {
		if _, dup := r.openers[scheme]; dup {
			panic(fmt.Sprintf("%s driver registered twice for scheme %q", r.kind, scheme))
		}
		r.openers[scheme] = opener
	}
}

// Schemes lists the registered URL schemes, sorted.
func (r *Registry[T]) Schemes() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	schemes := make([]string, 0, len(r.openers))
	for s := range r.openers {
		schemes = append(schemes, s+"://")
	}
	slices.Sort(schemes)
	return schemes
}

// Open parses rawURL and calls the opener registered for its scheme. Its own
// errors never contain the URL's password.
func (r *Registry[T]) Open(ctx context.Context, rawURL string) (T, error) {
	opener, u, err := r.lookup(rawURL)
	if err != nil {
		var zero T
		return zero, err
	}
	return opener(ctx, u)
}

// Known reports whether rawURL's scheme has a registered driver, so that
// configuration can be checked before anything is opened.
func (r *Registry[T]) Known(rawURL string) error {
	_, _, err := r.lookup(rawURL)
	return err
}

func (r *Registry[T]) lookup(rawURL string) (Opener[T], *url.URL, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme == "" {
		return nil, nil, fmt.Errorf("malformed %s URL %q: expected scheme://host", r.kind, redact.URL(rawURL))
	}
	r.mu.RLock()
	opener, ok := r.openers[strings.ToLower(u.Scheme)]
	r.mu.RUnlock()
	if !ok {
		return nil, nil, fmt.Errorf("unknown %s scheme %q in %q: supported are %s (forgotten driver import?)",
			r.kind, u.Scheme, redact.URL(rawURL), strings.Join(r.Schemes(), ", "))
	}
	return opener, u, nil
}
