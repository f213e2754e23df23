package registry

import (
	"strings"
	"testing"
)

// An unknown scheme's error suggests the scheme meant — by alias, before a
// '+', or by a typing mistake — and says nothing about imports, which the
// binaries' users cannot add.
func TestUnknownSchemeSuggestsTheMeantOne(t *testing.T) {
	t.Parallel()
	r := New[int]("publisher")
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

// An address written without a scheme (url.Parse reads localhost:9092 as
// scheme "localhost") is said to lack one, shown completed with the scheme
// its port suggests, or with the registered schemes to choose from, and
// never with its password.
func TestAddressWithoutSchemeIsSaidToLackOne(t *testing.T) {
	t.Parallel()
	r := New[int]("publisher")
	r.Register(1, "nats", "tls")
	r.Register(2, "kafka")
	for _, c := range []struct{ url, want string }{
		{"localhost:9092", `publisher URL "localhost:9092" has no scheme, which selects the driver: write it as kafka://localhost:9092 (supported are kafka://, nats://, tls://)`},
		{"kafka:9092", "write it as kafka://kafka:9092"},
		{"broker-1:9092,broker-2:9092", "write it as kafka://broker-1:9092,broker-2:9092"},
		{"127.0.0.1:4222", "write it as nats://127.0.0.1:4222"},
		{"user:Secret99@127.0.0.1:4222", "write it as nats://user:xxxxx@127.0.0.1:4222"},
		{"localhost:1234", "write it as scheme://localhost:1234 with one of kafka://, nats://, tls://"},
		{"localhost", "write it as scheme://localhost with one of"},
		{"localhost:6379", "write it as scheme://localhost:6379 with one of"}, // redis:// is not registered here
	} {
		_, _, err := r.Lookup(c.url)
		if err == nil {
			t.Fatalf("%s: no error", c.url)
		}
		msg := err.Error()
		if !strings.Contains(msg, "has no scheme") || !strings.Contains(msg, c.want) {
			t.Errorf("%s: %q does not say it has no scheme and %q", c.url, msg, c.want)
		}
		if strings.Contains(msg, "unknown") || strings.Contains(msg, "Secret99") {
			t.Errorf("%s: %q speaks of an unknown scheme or leaks the password", c.url, msg)
		}
	}
	// A URL with a scheme is not one without.
	if _, _, err := r.Lookup("nats://localhost:4222"); err != nil {
		t.Errorf("nats://localhost:4222: %v", err)
	}
}
