package publishertest_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/option"
	"github.com/outbox-relay/relay/pkg/publisher/publishertest"
)

// This file is the newcomer's task of issue 22 done as a test: a broker
// driver is one package — here an in-memory broker, "memq" — that
// registers its URL scheme and declares its options, and passes
// publishertest. Nothing else in the repository had to change for it (see
// docs/architecture.md, "Adding a driver").

// memqOptions are the driver's URL options, declared once.
var memqOptions = option.New("memq")

var memqMaxPayload = memqOptions.Int("max_payload", 1<<20, "Largest payload the queue takes, in bytes.").Unit("bytes")

// memqBrokers are the in-memory brokers by URL host: what a memq:// URL
// connects to.
var memqBrokers sync.Map // host → *memqBroker

func init() {
	publisher.Register(func(_ context.Context, u *url.URL) (publisher.Publisher, error) {
		v, err := memqOptions.Parse(u.Query())
		if err != nil {
			return nil, err
		}
		b, ok := memqBrokers.Load(u.Host)
		if !ok {
			return nil, fmt.Errorf("memq: no broker %q", u.Host)
		}
		return &memqPublisher{broker: b.(*memqBroker), maxPayload: memqMaxPayload.Get(v)}, nil
	}, "memq")
	publisher.RegisterOptions(memqOptions, "memq")
}

// memqBroker holds what arrived, by event type, and can be taken away.
type memqBroker struct {
	mu   sync.Mutex
	msgs map[string][]publishertest.Message
	down atomic.Bool
}

// memqPublisher is the driver's Publisher.
type memqPublisher struct {
	broker     *memqBroker
	maxPayload int64
	closed     atomic.Bool
}

var errMemqDown = errors.New("memq: broker unreachable")

func (p *memqPublisher) Publish(_ context.Context, batch []outbox.Event) []error {
	errs := make([]error, len(batch))
	for i, e := range batch {
		if p.closed.Load() {
			errs[i] = publisher.Unavailable(errors.New("memq: publisher closed"))
			continue
		}
		if p.broker.down.Load() {
			errs[i] = publisher.Unavailable(errMemqDown)
			continue
		}
		if int64(len(e.Payload)) > p.maxPayload {
			errs[i] = publisher.Permanent(fmt.Errorf("memq: payload of %d bytes is over max_payload (%d)", len(e.Payload), p.maxPayload))
			continue
		}
		headers, err := outbox.ParseHeaders(e.Headers)
		if err != nil {
			errs[i] = publisher.Permanent(fmt.Errorf("memq: headers: %w", err))
			continue
		}
		if headers == nil {
			headers = map[string]string{}
		}
		for k := range headers {
			if outbox.IsEventHeader(k) {
				delete(headers, k) // the relay's own, never the row's
			}
		}
		headers[outbox.HeaderEventID] = e.ID.String()
		headers[outbox.HeaderEventType] = e.Type
		if e.PartitionKey != "" {
			headers[outbox.HeaderPartitionKey] = e.PartitionKey
		}
		p.broker.mu.Lock()
		p.broker.msgs[e.Type] = append(p.broker.msgs[e.Type], publishertest.Message{
			ID: e.ID.String(), Type: e.Type, Key: e.PartitionKey, Payload: append([]byte(nil), e.Payload...), Headers: headers,
		})
		p.broker.mu.Unlock()
	}
	return errs
}

func (p *memqPublisher) Ping(context.Context) error {
	if p.broker.down.Load() {
		return errMemqDown
	}
	return nil
}

func (p *memqPublisher) Close(context.Context) error {
	p.closed.Store(true)
	return nil
}

// memqTestBroker is the suite's view of one in-memory broker.
type memqTestBroker struct {
	host   string
	broker *memqBroker
	types  atomic.Int64
}

func (b *memqTestBroker) Open(t *testing.T) publisher.Publisher {
	p, err := publisher.Open(context.Background(), "memq://"+b.host+"?max_payload=1024")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

func (b *memqTestBroker) Destination(*testing.T) string {
	return fmt.Sprintf("memq.type%d", b.types.Add(1))
}

func (b *memqTestBroker) Received(t *testing.T, eventType string, want int) []publishertest.Message {
	var got []publishertest.Message
	eventually.True(t, 10*time.Second, func() bool {
		b.broker.mu.Lock()
		defer b.broker.mu.Unlock()
		got = append([]publishertest.Message(nil), b.broker.msgs[eventType]...)
		return len(got) >= want
	}, func() string { return fmt.Sprintf("%d of %d messages", len(got), want) })
	return got
}

func (b *memqTestBroker) Stop(*testing.T)  { b.broker.down.Store(true) }
func (b *memqTestBroker) Start(*testing.T) { b.broker.down.Store(false) }

func TestANewcomersBrokerDriverPassesTheSuite(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	publishertest.Run(t, publishertest.Driver{
		NewBroker: func(t *testing.T) publishertest.Broker {
			host := fmt.Sprintf("broker-%d", n.Add(1))
			b := &memqTestBroker{host: host, broker: &memqBroker{msgs: map[string][]publishertest.Message{}}}
			memqBrokers.Store(host, b.broker)
			return b
		},
		Permanent: []publishertest.PermanentCase{{
			Name:    "payload over max_payload",
			Event:   outbox.Event{Payload: []byte(strings.Repeat("x", 2048)), Headers: []byte("{}")},
			WantErr: "max_payload",
		}},
		HeaderEventID: true,
	})
	// Its options are read as every driver's are.
	if _, err := publisher.Open(context.Background(), "memq://broker-1?max_paylod=5"); err == nil ||
		!strings.Contains(err.Error(), "did you mean max_payload") {
		t.Errorf("a misspelt option: %v, want a did-you-mean", err)
	}
}
