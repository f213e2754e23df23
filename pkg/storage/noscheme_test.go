package storage_test

import (
	"strings"
	"testing"

	"github.com/outbox-relay/relay/pkg/storage"
	_ "github.com/outbox-relay/relay/pkg/storage/mysql"
	_ "github.com/outbox-relay/relay/pkg/storage/postgres"
)

// STORAGE_URL=localhost:5432/db is a PostgreSQL address without its scheme:
// Lookup says so, and shows it with postgres://; an address url.Parse
// rejects (an IP address and port) is no "malformed URL" either.
func TestLookupSaysAURLHasNoScheme(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ url, want string }{
		{"localhost:5432/db", "write it as postgres://localhost:5432/db"},
		{"127.0.0.1:5432/db", "write it as postgres://127.0.0.1:5432/db"},
		{"root:Secret99@127.0.0.1:3306/db", "write it as mysql://root:xxxxx@127.0.0.1:3306/db"},
	} {
		_, err := storage.Lookup(c.url)
		if err == nil {
			t.Fatalf("Lookup(%s) = nil", c.url)
		}
		msg := err.Error()
		if !strings.Contains(msg, "storage URL") || !strings.Contains(msg, "has no scheme") || !strings.Contains(msg, c.want) {
			t.Errorf("Lookup(%s) = %q, want it to say it has no scheme and %q", c.url, msg, c.want)
		}
		if strings.Contains(msg, "unknown") || strings.Contains(msg, "malformed") || strings.Contains(msg, "Secret99") {
			t.Errorf("Lookup(%s) = %q: an unknown scheme, a malformed URL, or the password", c.url, msg)
		}
	}
}
