package main

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/outbox"

	_ "github.com/outbox-relay/relay/pkg/publisher/null"
)

// The embedded relay delivers what is pending, its reaper takes back the
// lease a relay that died left, and both stop cleanly with the context.
func TestEmbeddedRelayDeliversAndReapsALeaseLeftBehind(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	tb.InsertN(t, 5, "order.paid")
	abandoned := tb.InsertN(t, 1, "order.paid")[0]
	tb.Set(t, abandoned, "status = 'DELIVERING', locked_by = 'died', locked_at = now() - interval '2 minutes'")

	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, tb.URL, "null://", slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	eventually.True(t, 30*time.Second, func() bool { return tb.Counts(t)[outbox.StatusDelivered] == 6 },
		func() string { return "every event delivered, the abandoned one after the reaper took it back" })
	if row := tb.Get(t, abandoned); row.Attempts != 1 {
		t.Errorf("the abandoned event has %d attempts, want the 1 the reaper counted", row.Attempts)
	}
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the embedded relay did not stop within a minute")
	}
}

// A storage URL that is missing is said so.
func TestEmbeddedRelayNeedsAStorage(t *testing.T) {
	t.Parallel()
	if err := run(context.Background(), "", "null://", slog.New(slog.DiscardHandler)); err == nil {
		t.Fatal("run without a storage URL succeeded")
	}
}
