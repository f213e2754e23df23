package publisher_test

import (
	"context"
	"errors"
	"net/url"
	"testing"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
)

type fakeConfig struct{ host string }

type fakePublisher struct{ cfg fakeConfig }

func (*fakePublisher) Publish(context.Context, []outbox.Event) []error { return nil }
func (*fakePublisher) Ping(context.Context) error                      { return nil }
func (*fakePublisher) Close(context.Context) error                     { return nil }

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
	publisher.RegisterConfig(parse, open, "registerconfig-test")

	p, err := publisher.Open(context.Background(), "registerconfig-test://good")
	if fp, ok := p.(*fakePublisher); err != nil || !ok || fp.cfg.host != "good" {
		t.Errorf("Open of a good URL: %#v, %v; want the publisher opened from the parsed config", p, err)
	}
	for raw, want := range map[string]string{
		"registerconfig-test://bad-url":    "parse refused",
		"registerconfig-test://bad-config": "open refused",
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
