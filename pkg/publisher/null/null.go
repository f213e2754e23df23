// Package null is a publisher that acknowledges every event and sends
// nothing, for measuring the storage side of the relay alone. It serves
// null:// URLs.
package null

import (
	"context"
	"net/url"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
)

func init() {
	publisher.Register(func(context.Context, *url.URL) (publisher.Publisher, error) {
		return Publisher{}, nil
	}, "null")
}

// Publisher discards events.
type Publisher struct{}

// Publish acknowledges every event.
func (Publisher) Publish(_ context.Context, batch []outbox.Event) []error {
	return make([]error, len(batch))
}

// Ping always succeeds.
func (Publisher) Ping(context.Context) error { return nil }

// Close does nothing.
func (Publisher) Close(context.Context) error { return nil }
