// Package amqptest gives tests exchanges and queues of their own on a real
// RabbitMQ: the one at TEST_AMQP_URL, or amqp://guest:guest@127.0.0.1:5672,
// which `make test` starts. What it declares has a unique name (unless the
// test names it) and is deleted when the test ends, so tests run in parallel
// on one server and leave nothing behind.
package amqptest

import (
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/outbox-relay/relay/internal/eventually"
)

// DefaultURL is the server `make test` provides.
const DefaultURL = "amqp://guest:guest@127.0.0.1:5672"

// URL is the test server's URL: TEST_AMQP_URL, or DefaultURL.
func URL() string {
	if u := os.Getenv("TEST_AMQP_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// Host is the test server's host:port, for a proxy in front of it.
func Host(t testing.TB) string {
	t.Helper()
	uri, err := amqp091.ParseURI(URL())
	if err != nil {
		t.Fatalf("amqptest: TEST_AMQP_URL: %v", err)
	}
	return fmt.Sprintf("%s:%d", uri.Host, uri.Port)
}

// DriverURL is the test server's URL with query (no "?") as its query and,
// when via is not "", the address via (host:port, a proxy) in place of the
// server's.
func DriverURL(via, query string) string {
	u, err := url.Parse(URL())
	if err != nil {
		panic(fmt.Sprintf("amqptest: TEST_AMQP_URL: %v", err))
	}
	if via != "" {
		u.Host = via
	}
	u.RawQuery = query
	return u.String()
}

// Channel is a direct connection for setting up and reading back, closed at
// the end of the test.
func Channel(t testing.TB) *amqp091.Channel {
	t.Helper()
	conn, err := amqp091.Dial(URL())
	if err != nil {
		t.Fatalf("amqptest: connect to RabbitMQ at %s: %v (is it running? `make test` starts it)", Host(t), err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("amqptest: open channel: %v", err)
	}
	return ch
}

// Exchange declares a durable exchange of kind (topic, direct …) with a
// unique name, deleted at the end of the test, and returns its name.
func Exchange(t testing.TB, ch *amqp091.Channel, kind string) string {
	t.Helper()
	name := "test-" + uuid.NewString()
	if err := ch.ExchangeDeclare(name, kind, true, false, false, false, nil); err != nil {
		t.Fatalf("amqptest: declare exchange: %v", err)
	}
	t.Cleanup(func() { DeleteExchange(t, name) })
	return name
}

// Queue declares a durable queue with args, deleted at the end of the test,
// and returns its name: name, or a unique one when name is "".
func Queue(t testing.TB, ch *amqp091.Channel, name string, args amqp091.Table) string {
	t.Helper()
	if name == "" {
		name = "test-" + uuid.NewString()
	}
	if _, err := ch.QueueDeclare(name, true, false, false, false, args); err != nil {
		t.Fatalf("amqptest: declare queue %s: %v", name, err)
	}
	t.Cleanup(func() { DeleteQueue(t, name) })
	return name
}

// Bind binds queue to exchange for key (a routing key or, on a topic
// exchange, a pattern).
func Bind(t testing.TB, ch *amqp091.Channel, queue, exchange, key string) {
	t.Helper()
	if err := ch.QueueBind(queue, key, exchange, false, nil); err != nil {
		t.Fatalf("amqptest: bind queue %s: %v", queue, err)
	}
}

// BoundQueue declares a durable queue named key and binds it to exchange
// for key, so that events of type key land in the queue of that name. It is
// deleted at the end of the test.
func BoundQueue(t testing.TB, ch *amqp091.Channel, exchange, key string) string {
	t.Helper()
	q := Queue(t, ch, key, nil)
	Bind(t, ch, q, exchange, key)
	return q
}

// DeleteExchange deletes an exchange, reporting a failure as a test error.
// It uses a connection of its own: the test's channel may have been closed
// by an error the test provoked.
func DeleteExchange(t testing.TB, name string) {
	t.Helper()
	withOwnChannel(t, func(ch *amqp091.Channel) error { return ch.ExchangeDelete(name, false, false) })
}

// DeleteQueue deletes a queue, as DeleteExchange an exchange.
func DeleteQueue(t testing.TB, name string) {
	t.Helper()
	withOwnChannel(t, func(ch *amqp091.Channel) error { _, err := ch.QueueDelete(name, false, false, false); return err })
}

func withOwnChannel(t testing.TB, fn func(*amqp091.Channel) error) {
	t.Helper()
	conn, err := amqp091.Dial(URL())
	if err != nil {
		t.Errorf("amqptest: cleanup: connect: %v", err)
		return
	}
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	if err == nil {
		err = fn(ch)
	}
	if err != nil {
		t.Errorf("amqptest: cleanup: %v", err)
	}
}

// Drain reads queue until it is empty with at least want messages read, or
// 30 seconds pass, and returns them in queue order. It asks for one message
// at a time: for thousands, use Consume.
func Drain(t testing.TB, queue string, want int) []amqp091.Delivery {
	t.Helper()
	ch := Channel(t)
	var got []amqp091.Delivery
	eventually.True(t, 30*time.Second, func() bool {
		for {
			d, ok, err := ch.Get(queue, true)
			if err != nil {
				t.Fatalf("amqptest: get from %s: %v", queue, err)
			}
			if !ok {
				return len(got) >= want
			}
			got = append(got, d)
		}
	}, func() string { return fmt.Sprintf("%d messages in %s, have %d", want, queue, len(got)) })
	return got
}

// Consume takes n messages off queue, waiting up to a minute for them.
func Consume(t testing.TB, ch *amqp091.Channel, queue string, n int) []amqp091.Delivery {
	t.Helper()
	deliveries, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatalf("amqptest: consume %s: %v", queue, err)
	}
	deadline := time.After(time.Minute)
	got := make([]amqp091.Delivery, 0, n)
	for len(got) < n {
		select {
		case d := <-deliveries:
			got = append(got, d)
		case <-deadline:
			t.Fatalf("amqptest: received %d of %d messages from %s", len(got), n, queue)
		}
	}
	return got
}

// Queued is the number of messages waiting in queue.
func Queued(t testing.TB, ch *amqp091.Channel, queue string) int {
	t.Helper()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatalf("amqptest: inspect queue %s: %v", queue, err)
	}
	return q.Messages
}
