package relay_test

import (
	"flag"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

var benchAMQPQueue = flag.String("amqp-queue", "quorum", "type of the durable queue BenchmarkDrainAMQP fills: quorum, classic or lazy (a classic queue in lazy mode)")

// BenchmarkDrainAMQP drains into a durable queue on RabbitMQ (TEST_AMQP_URL,
// or the local server) with publisher confirms, as in production: the
// confirm for a persistent message comes once the queue has it on disk.
// The default is a quorum queue, RabbitMQ's recommended durable queue type,
// and on RabbitMQ 3.10 also the cheapest per message; -amqp-queue picks
// another. The exchange and queue are deleted afterwards.
func BenchmarkDrainAMQP(b *testing.B) {
	args := map[string]amqp091.Table{
		"quorum":  {"x-queue-type": "quorum"},
		"classic": nil,
		"lazy":    {"x-queue-mode": "lazy"},
	}
	queueArgs, ok := args[*benchAMQPQueue]
	if !ok {
		b.Fatalf("-amqp-queue=%q: want quorum, classic or lazy", *benchAMQPQueue)
	}
	exchange, _ := amqpDestination(b, "bench.#", queueArgs)
	benchDrain(b, openAMQP(b, "", exchange, ""), "bench.event")
}
