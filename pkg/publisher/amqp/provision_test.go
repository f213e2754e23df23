package amqp

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/internal/harness/amqptest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
)

// Provision declares the exchange and a queue bound to it for the event
// types, so that the first event lands in the queue instead of coming back
// unroutable; a second run changes nothing and counts what arrived.
func TestProvisionDeclaresExchangeAndQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	exchange, queue := "test-"+uuid.NewString(), "test-"+uuid.NewString()
	t.Cleanup(func() { amqptest.DeleteQueue(t, queue); amqptest.DeleteExchange(t, exchange) })
	p, err := publisher.Open(ctx, amqptest.DriverURL("", "exchange="+exchange))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	prov := p.(publisher.Provisioner)
	params := publisher.ProvisionParams{EventTypes: []string{"orders.>"}, Name: queue}
	got, err := prov.Provision(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	want := []publisher.Provisioned{
		{Kind: "exchange", Name: exchange, Action: publisher.Created, Detail: `type topic in vhost "/"`},
		{Kind: "queue", Name: queue, Action: publisher.Created, Detail: "bound to exchange " + exchange + " with orders.#, 0 messages"},
	}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("Provision = %+v, want %+v", got, want)
	}
	if errs := p.Publish(ctx, []outbox.Event{newEvent("orders.paid", "k", "{}", "")}); errs[0] != nil {
		t.Fatalf("publish after Provision: %v", errs[0])
	}
	got, err = prov.Provision(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Action != publisher.Exists || got[1].Action != publisher.Exists ||
		got[1].Detail != "bound to exchange "+exchange+" with orders.#, 1 message" {
		t.Fatalf("second Provision = %+v, want both as they were and 1 message", got)
	}

	// Without a queue the exchange alone is declared, and the answer says
	// that it keeps nothing.
	got, err = prov.Provision(ctx, publisher.ProvisionParams{EventTypes: []string{"orders.>"}})
	if err != nil || len(got) != 1 || !strings.Contains(got[0].Detail, "no queue named") {
		t.Fatalf("Provision without a queue = %+v, %v, want the exchange and a word on queues", got, err)
	}
}
