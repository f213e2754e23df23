package main

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/natstest"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
)

// TestBrokerDownAtStartIsReported: an idle relay whose broker cannot be
// reached must say so after it starts — naming the broker without its
// password and the reason — keep saying so while it is down, and say when
// it is back.
func TestBrokerDownAtStartIsReported(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	srv := natstest.Start(t, func(o *server.Options) { o.Username, o.Password = "relay", secret })
	srv.Stop()
	addr := strings.TrimPrefix(srv.URL(), "nats://")

	r := startRelay(t, map[string]string{
		"STORAGE_URL":   tb.URL,
		"PUBLISHER_URL": "nats://relay:" + secret + "@" + addr,
	})
	warned := func() bool {
		log := r.log.String()
		return strings.Contains(log, "broker unavailable") && strings.Contains(log, "broker still unavailable")
	}
	eventually.True(t, 30*time.Second, warned, func() string { return "warnings about the broker; log:\n" + r.log.String() })
	log := r.log.String()
	if !strings.Contains(log, "broker=nats://relay:xxxxx@"+addr) {
		t.Errorf("the warnings do not name the broker (password masked):\n%s", log)
	}
	if strings.Contains(log, secret) {
		t.Fatalf("the log leaks the broker's password:\n%s", log)
	}

	srv.Restart()
	eventually.True(t, 30*time.Second, func() bool { return strings.Contains(r.log.String(), "broker available again") },
		func() string { return "the broker's return logged; log:\n" + r.log.String() })
}
