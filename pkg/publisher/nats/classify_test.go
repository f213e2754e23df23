package nats

import (
	"context"
	"errors"
	"net/url"
	"testing"

	"github.com/google/uuid"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/relay/internal/harness/natstest"
	"github.com/outbox-relay/relay/pkg/publisher"
)

// TestNoResponseFromAnExistingStreamIsUnavailable classifies the errors a
// publish gets when the stream capturing its subject exists but does not
// answer, as while a replicated stream has no leader, which one in-process
// server cannot stage. JetStream is not taking messages then: the relay
// must pause, not spend the events' attempts.
func TestNoResponseFromAnExistingStreamIsUnavailable(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	srv.Stream(t, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}})
	u, err := url.Parse(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })

	for _, cause := range []error{natsgo.ErrNoResponders, jetstream.ErrNoStreamResponse} {
		err := p.classify(context.Background(), p.cur, "orders.created", cause, map[string]error{})
		if !publisher.IsUnavailable(err) || publisher.IsPermanent(err) || !errors.Is(err, cause) {
			t.Errorf("%v for a subject a stream captures: got %v, want Unavailable wrapping it", cause, err)
		}
	}
	// Without a stream for the subject, the same answer is the event's fault.
	if err := p.classify(context.Background(), p.cur, "payments.created", natsgo.ErrNoResponders, map[string]error{}); !publisher.IsPermanent(err) {
		t.Errorf("no responders for a subject no stream captures: got %v, want permanent", err)
	}
}

func TestAppendUUIDWritesWhatStringWrites(t *testing.T) {
	t.Parallel()
	for range 100 {
		id := uuid.New()
		if got := string(appendUUID(nil, id)); got != id.String() {
			t.Fatalf("appendUUID(%s) = %s", id, got)
		}
	}
}
