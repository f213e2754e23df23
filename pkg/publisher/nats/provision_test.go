package nats_test

import (
	"context"
	"strings"
	"testing"

	"github.com/outbox-relay/relay/internal/harness/natstest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/nats"
)

// Provision creates the stream events need, with the duplicate window the
// relay relies on; a second run adds a missing subject and changes nothing
// else; a publish then lands, and the description counts it.
func TestProvisionCreatesTheStream(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	ctx := context.Background()
	p, err := publisher.Open(ctx, srv.URL()+"?subject_prefix=app.")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	prov := p.(publisher.Provisioner)

	// Without a stream the event is refused, naming relay-cli's fix.
	errs := p.Publish(ctx, []outbox.Event{event("orders.paid", "k", "{}", "")})
	if errs[0] == nil || !strings.Contains(errs[0].Error(), `relay-cli setup-broker --event-type "orders.paid"`) {
		t.Fatalf("publish without a stream: %v, want the relay-cli fix named", errs[0])
	}

	got, err := prov.Provision(ctx, publisher.ProvisionParams{EventTypes: []string{"orders.>"}})
	if err != nil {
		t.Fatal(err)
	}
	want := publisher.Provisioned{Kind: "stream", Name: nats.StreamDefault, Action: publisher.Created,
		Detail: "subjects app.orders.>, duplicate window 2m0s, 0 messages"}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("Provision = %+v, want %+v", got, want)
	}
	if errs := p.Publish(ctx, []outbox.Event{event("orders.paid", "k", "{}", "")}); errs[0] != nil {
		t.Fatalf("publish into the new stream: %v", errs[0])
	}

	got, err = prov.Provision(ctx, publisher.ProvisionParams{EventTypes: []string{"orders.>", "users.created"}})
	if err != nil {
		t.Fatal(err)
	}
	want = publisher.Provisioned{Kind: "stream", Name: nats.StreamDefault, Action: publisher.Updated,
		Detail: "subjects app.orders.> app.users.created, duplicate window 2m0s, 1 message"}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("second Provision = %+v, want %+v", got, want)
	}
	got, err = prov.Provision(ctx, publisher.ProvisionParams{EventTypes: []string{"users.created"}})
	if err != nil || len(got) != 1 || got[0].Action != publisher.Exists {
		t.Fatalf("third Provision = %+v, %v, want the stream as it is", got, err)
	}

	// A stream on every subject would capture JetStream's API.
	bare, err := publisher.Open(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close(ctx)
	if _, err := bare.(publisher.Provisioner).Provision(ctx, publisher.ProvisionParams{EventTypes: []string{">"}, Name: "ALL"}); err == nil {
		t.Error("Provision of > without a prefix succeeded")
	}
}
