package mysql_test

import (
	"testing"

	"github.com/outbox-relay/relay/internal/harness/mysqltest"
	"github.com/outbox-relay/relay/pkg/storage/storagetest"
)

// TestStorage runs the conformance suite every storage driver passes.
func TestStorage(t *testing.T) {
	t.Parallel()
	storagetest.Run(t, mysqltest.Harness{})
}
