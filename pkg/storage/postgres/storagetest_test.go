package postgres_test

import (
	"testing"

	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/storage/storagetest"
)

// TestStorage runs the conformance suite every storage driver passes.
func TestStorage(t *testing.T) {
	t.Parallel()
	storagetest.Run(t, pgtest.Harness{})
}

// TestStoragePartitioned runs the same suite on a table partitioned by
// day: claims, ordered claims, the reaper, NOTIFY and every admin
// operation work on it unchanged.
func TestStoragePartitioned(t *testing.T) {
	t.Parallel()
	storagetest.Run(t, pgtest.PartitionedHarness{By: "day"})
}
