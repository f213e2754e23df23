// Package registry maps URL schemes to the drivers a program imports, so that
// storage and publisher drivers are both chosen from a URL the same way and
// report an unknown scheme the same way.
package registry

import (
	"context"
	"fmt"
	"net"
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

// New returns an empty registry for drivers of the named kind.
func New[D any](kind string) *Registry[D] {
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
	if noScheme(rawURL, u, err) {
		return zero, nil, r.noSchemeError(rawURL)
	}
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

// noScheme reports whether rawURL is an address written without a scheme:
// host:port ("localhost:9092", which url.Parse reads as scheme "localhost"
// and "9092"), user:password@host, a host and path, or a bare host.
func noScheme(rawURL string, u *url.URL, parseErr error) bool {
	if rawURL == "" || strings.Contains(rawURL, "://") {
		return false
	}
	if parseErr != nil || u.Scheme == "" {
		return true
	}
	rest := u.Opaque
	return rest != "" && (rest[0] >= '0' && rest[0] <= '9' || strings.Contains(rest, "@"))
}

// wellKnownPorts are the schemes whose servers usually listen on a port,
// to complete an address written without a scheme with the one it most
// likely needs.
var wellKnownPorts = map[string][]string{
	"4222": {"nats"},
	"5672": {"amqp"},
	"5671": {"amqps"},
	"9092": {"kafka"},
	"6379": {"redis"},
	"5432": {"postgres", "postgresql"},
	"3306": {"mysql"},
	"80":   {"http"},
	"443":  {"https"},
}

// noSchemeError explains an address written without a scheme, which
// selects the driver, and shows it with the scheme its port suggests.
func (r *Registry[D]) noSchemeError(rawURL string) error {
	// With a scheme in front, redact finds the user info's password.
	shown := strings.TrimPrefix(redact.URL("scheme://"+rawURL), "scheme://")
	schemes := strings.Join(r.Schemes(), ", ")
	if s := r.schemeForPort(rawURL); s != "" {
		return fmt.Errorf("%s URL %q has no scheme, which selects the driver: write it as %s://%s (supported are %s)",
			r.kind, shown, s, shown, schemes)
	}
	return fmt.Errorf("%s URL %q has no scheme, which selects the driver: write it as scheme://%s with one of %s",
		r.kind, shown, shown, schemes)
}

// schemeForPort returns the registered scheme whose servers usually listen
// on the port of rawURL's (first) address, or "".
func (r *Registry[D]) schemeForPort(rawURL string) string {
	addr := rawURL
	if i := strings.LastIndex(addr, "@"); i >= 0 {
		addr = addr[i+1:]
	}
	if i := strings.IndexAny(addr, "/?,"); i >= 0 {
		addr = addr[:i]
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, s := range wellKnownPorts[port] {
		if _, ok := r.drivers[s]; ok {
			return s
		}
	}
	return ""
}
