package kafka_test

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/relay/internal/harness/kafkatest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
)

// On a cluster that creates no topics on demand, Provision creates the
// event types' topics, so that events land instead of going DEAD.
func TestProvisionCreatesTopics(t *testing.T) {
	t.Parallel()
	c := kafkatest.Start(t, kfake.NumBrokers(1))
	ctx := context.Background()
	p, err := publisher.Open(ctx, c.URL("?topic_prefix=app."))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	prov := p.(publisher.Provisioner)
	if _, err := prov.Provision(ctx, publisher.ProvisionParams{EventTypes: []string{"orders.>"}}); err == nil {
		t.Error("a pattern was accepted for Kafka topics")
	}
	got, err := prov.Provision(ctx, publisher.ProvisionParams{EventTypes: []string{"orders.paid"}, Partitions: 3})
	if err != nil {
		t.Fatal(err)
	}
	want := publisher.Provisioned{Kind: "topic", Name: "app.orders.paid", Action: publisher.Created, Detail: "3 partitions, 0 messages"}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("Provision = %+v, want %+v", got, want)
	}
	if errs := p.Publish(ctx, []outbox.Event{event("orders.paid", "k", "{}", "")}); errs[0] != nil {
		t.Fatalf("publish after Provision: %v", errs[0])
	}
	c.Records(t, "app.orders.paid", 1)
	got, err = prov.Provision(ctx, publisher.ProvisionParams{EventTypes: []string{"orders.paid"}})
	want = publisher.Provisioned{Kind: "topic", Name: "app.orders.paid", Action: publisher.Exists, Detail: "3 partitions, 1 message"}
	if err != nil || len(got) != 1 || got[0] != want {
		t.Fatalf("second Provision = %+v, %v, want %+v", got, err, want)
	}
}
