package null_test

import (
	"context"
	"strings"
	"testing"

	"github.com/outbox-relay/relay/pkg/publisher"
	_ "github.com/outbox-relay/relay/pkg/publisher/null"
)

// null:// takes no option: one given is a mistake, such as a URL meant for
// another driver, and is said so instead of being ignored.
func TestOpenRefusesOptions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, err := publisher.Open(ctx, "null://")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	if _, err := publisher.Open(ctx, "null://?timeout=5s"); err == nil || !strings.Contains(err.Error(), `null URL: unknown option "timeout": the driver takes no options`) {
		t.Errorf("null://?timeout=5s: %v, want an unknown-option error", err)
	}
}
