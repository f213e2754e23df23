package publisher

import (
	"context"
	"strings"
)

// Provisioner is offered by a publisher whose broker must hold something
// before it takes events — a JetStream stream that captures their subjects,
// a RabbitMQ exchange, a Kafka topic where the cluster creates none on
// demand — so that a newcomer needs no broker tool of their own. It is
// optional: `relay-cli setup-broker` finds it with a type assertion, as the
// relay finds storage.Notifier, and a driver without it (Redis streams,
// webhooks) needs nothing created. The code that talks to the broker stays
// in the driver; relay-cli never imports a broker client.
type Provisioner interface {
	// Provision creates what events of p.EventTypes need and is missing,
	// adds what is missing to what exists (a subject to a stream), and
	// describes every object, created or found, with what it holds now.
	// It never deletes or narrows anything, so running it twice changes
	// nothing, and running it again later shows what arrived.
	Provision(ctx context.Context, p ProvisionParams) ([]Provisioned, error)
}

// ProvisionParams says what to create.
type ProvisionParams struct {
	// EventTypes are the event types to make room for. One that ends in
	// ">" (orders.>, or > alone) stands for every type that starts with
	// what precedes it, on brokers that route by pattern (NATS, RabbitMQ);
	// Kafka needs every topic named.
	EventTypes []string
	// Name names the object that keeps the events, where the driver
	// creates one: the JetStream stream (default StreamDefault in the
	// NATS driver) or a RabbitMQ queue bound to the exchange (none when
	// empty: the exchange alone drops what no queue takes).
	Name string
	// Partitions is the partition count of new Kafka topics; 0 takes
	// the cluster's default.
	Partitions int
}

// Provisioned is one broker object as Provision left it.
type Provisioned struct {
	// Kind is "stream", "exchange", "queue" or "topic".
	Kind string `json:"kind"`
	Name string `json:"name"`
	// Action is "created", "updated" (something was added to it) or
	// "exists".
	Action string `json:"action"`
	// Detail says what it captures and holds: "subjects orders.>,
	// duplicate window 2m0s, 3 messages".
	Detail string `json:"detail"`
}

// Provision actions.
const (
	Created = "created"
	Updated = "updated"
	Exists  = "exists"
)

// IsPrefixPattern reports whether an event type given to Provision stands
// for every type under a prefix ("orders.>", ">"), and returns the prefix
// ("orders.", "").
func IsPrefixPattern(eventType string) (prefix string, ok bool) {
	if eventType == ">" {
		return "", true
	}
	if strings.HasSuffix(eventType, ".>") {
		return strings.TrimSuffix(eventType, ">"), true
	}
	return "", false
}
