// Package null is a publisher that acknowledges every event and sends
// nothing, for measuring the storage side of the relay alone. It serves
// null:// URLs.
package null

import (
	"context"
	"net/url"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/option"
)

func init() {
	publisher.Register(func(_ context.Context, u *url.URL) (publisher.Publisher, error) {
		// A null:// URL takes no option; one given is a mistake (a URL
		// meant for another driver, say) that must not pass unnoticed.
		if _, err := Options.Parse(u.Query()); err != nil {
			return nil, err
		}
		return Publisher{}, nil
	}, "null")
	publisher.RegisterOptions(Options, "null")
}

// Options are the driver's URL options: none.
var Options = option.New("null")

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
