package publisher_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/option"
)

type fakeConfig struct{ host string }

type fakePublisher struct{ cfg fakeConfig }

func (*fakePublisher) Publish(context.Context, []outbox.Event) []error { return nil }
func (*fakePublisher) Ping(context.Context) error                      { return nil }
func (*fakePublisher) Close(context.Context) error                     { return nil }

var registerRuns atomic.Int64

func TestRegisterConfig(t *testing.T) {
	t.Parallel()
	parse := func(u *url.URL) (fakeConfig, error) {
		if u.Host == "bad-url" {
			return fakeConfig{}, errors.New("parse refused")
		}
		return fakeConfig{host: u.Host}, nil
	}
	open := func(_ context.Context, cfg fakeConfig) (*fakePublisher, error) {
		if cfg.host == "bad-config" {
			return nil, errors.New("open refused")
		}
		return &fakePublisher{cfg}, nil
	}
	// The registry is global: a scheme of its own for every run, so that
	// -count=N does not register it twice.
	scheme := fmt.Sprintf("registerconfig-test-%d", registerRuns.Add(1))
	publisher.RegisterConfig(parse, open, scheme)

	p, err := publisher.Open(context.Background(), scheme+"://good")
	if fp, ok := p.(*fakePublisher); err != nil || !ok || fp.cfg.host != "good" {
		t.Errorf("Open of a good URL: %#v, %v; want the publisher opened from the parsed config", p, err)
	}
	for raw, want := range map[string]string{
		scheme + "://bad-url":    "parse refused",
		scheme + "://bad-config": "open refused",
	} {
		p, err := publisher.Open(context.Background(), raw)
		if err == nil || err.Error() != want {
			t.Errorf("Open(%q): %v, want %q", raw, err, want)
		}
		// A nil *fakePublisher in the interface would not be == nil.
		if p != nil {
			t.Errorf("Open(%q) returned %#v with its error, want a nil Publisher", raw, p)
		}
	}
}

func TestRetryAfterTravelsThroughWrapping(t *testing.T) {
	t.Parallel()
	base := errors.New("endpoint busy")
	err := fmt.Errorf("event 3: %w", publisher.RetryAfter(base, 30*time.Second))
	if d, ok := publisher.RetryDelay(err); !ok || d != 30*time.Second {
		t.Errorf("RetryDelay of a wrapped RetryAfter = %s, %v; want 30s, true", d, ok)
	}
	if err.Error() != "event 3: endpoint busy" || !errors.Is(err, base) {
		t.Errorf("RetryAfter changed the error: %q", err)
	}
	if publisher.IsPermanent(err) || publisher.IsUnavailable(err) {
		t.Error("RetryAfter made a retryable error permanent or unavailable")
	}
	if d, ok := publisher.RetryDelay(publisher.RetryAfter(base, -time.Second)); !ok || d != 0 {
		t.Errorf("negative Retry-After = %s, %v; want 0, true", d, ok)
	}
	if _, ok := publisher.RetryDelay(base); ok {
		t.Error("RetryDelay found a delay in a plain error")
	}
	if publisher.RetryAfter(nil, time.Second) != nil {
		t.Error("RetryAfter(nil) is not nil")
	}
}

func TestLookupEnvReadsOnlyTheGivenEnvironment(t *testing.T) {
	t.Parallel()
	if _, _, err := publisher.LookupEnv(context.Background(), "PATH"); err == nil ||
		!strings.Contains(err.Error(), "publisher.WithEnv") {
		t.Errorf("LookupEnv without WithEnv: %v, want an error naming publisher.WithEnv", err)
	}
	env := map[string]string{"HOOK_SECRET": "s"}
	ctx := publisher.WithEnv(context.Background(), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if v, ok, err := publisher.LookupEnv(ctx, "HOOK_SECRET"); v != "s" || !ok || err != nil {
		t.Errorf("LookupEnv(HOOK_SECRET) = %q, %v, %v", v, ok, err)
	}
	if _, ok, err := publisher.LookupEnv(ctx, "PATH"); ok || err != nil {
		t.Errorf("LookupEnv(PATH) found it (%v, %v): the process environment leaked in", ok, err)
	}
}

func TestClip(t *testing.T) {
	t.Parallel()
	if got := publisher.Clip("orders.created"); got != "orders.created" {
		t.Errorf("short name changed: %q", got)
	}
	long := strings.Repeat("a", 63) + "é" + strings.Repeat("b", 100) // é straddles byte 64
	if got, want := publisher.Clip(long), strings.Repeat("a", 63)+"…"; got != want {
		t.Errorf("Clip = %q, want %q: cut on a character boundary", got, want)
	}
	if got := publisher.Clip(strings.Repeat("x", 5000)); len(got) != 64+len("…") {
		t.Errorf("Clip kept %d bytes of 5000", len(got))
	}
}

// Redact masks what the driver of a URL's scheme declares secret, and
// what redact.URL's patterns find in any URL.
func TestRedactFollowsTheDeclaration(t *testing.T) {
	t.Parallel()
	set := option.New("redacttest")
	set.String("api_key", "", "A key.").Secret()
	set.String("region", "", "Where.")
	publisher.RegisterOptions(set, "redacttest")
	const secret = "Zq9NotInAnyLog"
	if got, want := publisher.Redact("redacttest://u:"+secret+"@h?region=eu&api_key="+secret), "redacttest://u:xxxxx@h?region=eu&api_key=xxxxx"; got != want {
		t.Errorf("Redact = %q, want %q", got, want)
	}
	if got := publisher.Redact("unregistered://u:" + secret + "@h?password=" + secret); strings.Contains(got, secret) {
		t.Errorf("Redact of an unregistered scheme = %q, want the password masked", got)
	}
}
