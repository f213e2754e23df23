package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/outbox-relay/relay/internal/redact"
	"github.com/outbox-relay/relay/pkg/publisher"
	_ "github.com/outbox-relay/relay/pkg/publisher/amqp"
	_ "github.com/outbox-relay/relay/pkg/publisher/kafka"
	_ "github.com/outbox-relay/relay/pkg/publisher/nats"
	_ "github.com/outbox-relay/relay/pkg/publisher/null"
	_ "github.com/outbox-relay/relay/pkg/publisher/redis"
	_ "github.com/outbox-relay/relay/pkg/publisher/stdout"
	_ "github.com/outbox-relay/relay/pkg/publisher/webhook"
)

func init() { register(setupBrokerCommand) }

// setupBrokerCommand creates on the broker what the relay's events need —
// without it a newcomer's first events go DEAD — through the publisher
// driver's Provisioner, so that relay-cli stays behind the publisher
// boundary as it stays behind the storage one.
func setupBrokerCommand() *cli.Command {
	return &cli.Command{
		Name:      "setup-broker",
		Usage:     "create the stream, exchange and queue, or topics the relay's events need on the broker",
		ArgsUsage: " ",
		Description: "Creates what PUBLISHER_URL's broker needs before it takes events of the given types,\n" +
			"where missing: a JetStream stream capturing their subjects (with a 2m duplicate window),\n" +
			"a RabbitMQ exchange and, with --name, a queue bound to it, or Kafka topics. It never\n" +
			"deletes or narrows anything; run it again to see what each holds (messages so far).\n" +
			"An event type ending in > (orders.>) stands for every type under that prefix.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "publisher-url", EnvVars: []string{"PUBLISHER_URL"}, Usage: "the broker, as the relay's `URL` (nats://, amqp://, kafka://)"},
			&cli.StringSliceFlag{Name: "event-type", Usage: "make room for events of this `TYPE` (repeat for several; orders.> for every type under orders.)"},
			&cli.StringFlag{Name: "name", Usage: "the JetStream stream (default OUTBOX) or RabbitMQ queue to create (`NAME`)"},
			&cli.IntFlag{Name: "partitions", Usage: "partitions of new Kafka topics (`N`; default: the cluster's)"},
			jsonFlag(),
		},
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			raw := c.String("publisher-url")
			if raw == "" {
				return usagef("setup-broker needs the broker: set PUBLISHER_URL (or --publisher-url) as for the relay, such as nats://127.0.0.1:4222")
			}
			if err := publisher.Check(raw); err != nil {
				return usagef("%s: %w", settingName(c, "publisher-url"), err)
			}
			if c.Int("partitions") < 0 {
				return usagef("--partitions must not be negative, got %d", c.Int("partitions"))
			}
			pub, err := publisher.Open(c.Context, raw)
			if err != nil {
				return usagef("%s: %w", settingName(c, "publisher-url"), err)
			}
			defer func() { _ = pub.Close(context.WithoutCancel(c.Context)) }()
			prov, ok := pub.(publisher.Provisioner)
			if !ok {
				// Redis creates a stream with its first entry; a webhook
				// endpoint is the receiver's.
				fmt.Fprintf(c.App.ErrWriter, "relay-cli: %s needs nothing created: events go there as they are\n", redact.URL(raw))
				if c.Bool("json") {
					return writeJSON(c.App.Writer, []publisher.Provisioned{})
				}
				return nil
			}
			done, err := prov.Provision(c.Context, publisher.ProvisionParams{
				EventTypes: c.StringSlice("event-type"),
				Name:       c.String("name"),
				Partitions: c.Int("partitions"),
			})
			if err != nil {
				// Every driver asks for event types the same way.
				if len(c.StringSlice("event-type")) == 0 && !errors.Is(err, context.Canceled) {
					return usageError{fmt.Errorf("%s; pass --event-type", redact.Error(err, raw))}
				}
				return errors.New(redact.Error(err, raw))
			}
			if c.Bool("json") {
				return writeJSON(c.App.Writer, nonNil(done))
			}
			w := newTable(c.App.Writer)
			for _, d := range done {
				fmt.Fprintf(w, "%s\t%s %s\t%s\n", d.Action, d.Kind, d.Name, d.Detail)
			}
			return w.Flush()
		},
	}
}
