package publisher_test

import (
	"strings"
	"testing"

	"github.com/outbox-relay/relay/pkg/publisher"
	_ "github.com/outbox-relay/relay/pkg/publisher/kafka"
	_ "github.com/outbox-relay/relay/pkg/publisher/nats"
)

// PUBLISHER_URL=localhost:9092 is a Kafka address without its scheme, not
// the scheme "localhost": Check says so and shows it with kafka://.
func TestCheckSaysAURLHasNoScheme(t *testing.T) {
	t.Parallel()
	err := publisher.Check("localhost:9092")
	if err == nil {
		t.Fatal("Check(localhost:9092) = nil")
	}
	msg := err.Error()
	for _, want := range []string{`publisher URL "localhost:9092" has no scheme`, "kafka://localhost:9092", "nats://"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Check(localhost:9092) = %q, want it to say %q", msg, want)
		}
	}
	if strings.Contains(msg, `scheme "localhost"`) {
		t.Errorf("Check(localhost:9092) = %q: takes localhost for the scheme", msg)
	}
}
