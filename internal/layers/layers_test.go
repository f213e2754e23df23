package layers

import (
	"os/exec"
	"strings"
	"testing"
)

// Clients that one side of the relay must never pull into the other.
var (
	databaseClients = []string{"github.com/jackc/pgx", "github.com/go-sql-driver/mysql"}
	brokerClients   = []string{"github.com/nats-io/nats.go", "github.com/segmentio/kafka-go", "github.com/rabbitmq/amqp091-go", "github.com/redis/go-redis"}
)

func TestImportRules(t *testing.T) {
	t.Parallel()
	rules := []struct {
		pkgs      string // a go list pattern
		forbidden []string
	}{
		{"github.com/outbox-relay/relay/pkg/publisher/...", databaseClients},
		{"github.com/outbox-relay/relay/pkg/storage/...", brokerClients},
		{"github.com/outbox-relay/relay/pkg/outbox", append(databaseClients, brokerClients...)},
		{"github.com/outbox-relay/relay/pkg/relay", append(databaseClients, brokerClients...)},
		{"github.com/outbox-relay/relay/pkg/reaper", append(databaseClients, brokerClients...)},
		{"github.com/outbox-relay/relay/internal/retention", append(databaseClients, brokerClients...)},
	}
	for _, r := range rules {
		// Each package's dependencies on its own line: "pkg: dep dep …".
		out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}: {{join .Deps " "}}`, r.pkgs).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", r.pkgs, err, out)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			pkg, deps, _ := strings.Cut(line, ": ")
			if strings.HasSuffix(pkg, "test") { // test support packages may use anything
				continue
			}
			for _, dep := range strings.Fields(deps) {
				for _, f := range r.forbidden {
					if dep == f || strings.HasPrefix(dep, f+"/") {
						t.Errorf("%s links %s", pkg, dep)
					}
				}
			}
		}
	}
}
