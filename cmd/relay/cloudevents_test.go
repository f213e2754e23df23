package main

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/harness/cetest"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/internal/harness/webhooktest"
)

// TestCloudEventsSourceIsTheRelaysTable runs the relay with
// format=cloudevents and no ce_source: the events' source is "/" and the
// table the relay reads, which it hands the publisher.
func TestCloudEventsSourceIsTheRelaysTable(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	rcv := webhooktest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, nil, map[string]string{
			"STORAGE_URL":        pgtest.URL(),
			"STORAGE_TABLE_NAME": tb.Name,
			"PUBLISHER_URL":      rcv.URL("/in?unsigned=true&format=cloudevents"),
			"HTTP_ADDR":          "127.0.0.1:0",
			"POLL_INTERVAL":      "50ms",
		}, io.Discard, io.Discard)
	}()
	ids := tb.InsertN(t, 1, "e2e.ce")
	r := rcv.Delivered(t, 1, nil)[0]
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("relay exited %d", code)
	}
	got, err := cetest.HTTP(r.Header, r.Body)
	if err != nil {
		t.Fatalf("the SDK cannot decode the request: %v", err)
	}
	if got.ID() != ids[0].String() || got.Source() != "/"+tb.Name {
		t.Errorf("id %q source %q, want %s and /%s", got.ID(), got.Source(), ids[0], tb.Name)
	}
}
