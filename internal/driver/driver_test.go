package driver

import (
	"strings"
	"testing"
)

// An unknown scheme's error suggests the scheme meant — by alias, before a
// '+', or by a typing mistake — and says nothing about imports, which the
// binaries' users cannot add.
func TestUnknownSchemeSuggestsTheMeantOne(t *testing.T) {
	t.Parallel()
	r := NewRegistry[int]("publisher")
	r.Register(1, "nats", "tls")
	r.Register(2, "amqp", "amqps")
	r.Register(3, "postgresql")
	r.Alias("rabbitmq", "amqp")
	for _, c := range []struct{ url, want string }{
		{"rabbitmq://guest:Secret99@localhost:5672/", "did you mean amqp://?"},
		{"RabbitMQ://localhost/", "did you mean amqp://?"},
		{"nat://localhost:4222", "did you mean nats://?"},
		{"postgresql+ssl://db/app", "did you mean postgresql://?"},
		{"rabbitmq+tls://localhost/", "did you mean amqp://?"},
		{"carrier-pigeon://coop", "supported are amqp://, amqps://, nats://, postgresql://, tls://"},
	} {
		_, _, err := r.Lookup(c.url)
		if err == nil {
			t.Fatalf("%s: no error", c.url)
		}
		msg := err.Error()
		if !strings.Contains(msg, c.want) {
			t.Errorf("%s: %q does not say %q", c.url, msg, c.want)
		}
		if strings.Contains(msg, "import") || strings.Contains(msg, "Secret99") {
			t.Errorf("%s: %q speaks of imports or leaks the password", c.url, msg)
		}
	}
}
