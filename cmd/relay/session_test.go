package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/outbox"
)

// TestCorrectedStatementTimeoutIsPickedUpWithoutARestart is a DBA's mistake
// and its fix: the relay's role gets statement_timeout = '100ms' while every
// UPDATE on the table takes 300 ms, so every claim or settle fails (a held
// claim only reads; its settle updates), and /readyz says why. After ALTER
// ROLE … RESET statement_timeout the relay, not restarted, delivers every
// event within seconds, although its pooled connections logged in with the
// timeout, and /readyz turns 200.
func TestCorrectedStatementTimeoutIsPickedUpWithoutARestart(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	role, roleURL := tb.Login(t, "SELECT, UPDATE, DELETE")
	tb.Exec(t, "ALTER ROLE "+role+" SET statement_timeout = '100ms'")
	tb.SlowUpdates(t, 300*time.Millisecond)
	const n = 300
	tb.InsertN(t, n, "session.event")

	r := startRelay(t, map[string]string{"STORAGE_URL": roleURL, "PUBLISHER_URL": "null://", "BATCH_SIZE": "100"})
	var rb readyBody
	eventually.True(t, 30*time.Second, func() bool {
		var code int
		code, rb = r.ready(t)
		engine := rb.Checks["engine"]
		// Claims read; the settles update and time out. Either way the
		// engine is stuck, and /readyz must say on what.
		return code == http.StatusServiceUnavailable &&
			(strings.HasPrefix(engine, "error: claim batch: ") || strings.HasPrefix(engine, "error: settle (")) &&
			strings.Contains(engine, "canceling statement due to statement timeout (SQLSTATE 57014)")
	}, func() string {
		return fmt.Sprintf("/readyz naming the statement timeout; last %+v; log:\n%s", rb, r.log.String())
	})
	t.Logf("/readyz while claims fail: %s", rb.Checks["engine"])
	if got := tb.Counts(t)[outbox.StatusDelivered]; got != 0 {
		t.Fatalf("%d events delivered under the timeout: the provocation failed", got)
	}

	tb.Exec(t, "ALTER ROLE "+role+" RESET statement_timeout")
	fixed := time.Now()
	eventually.True(t, 30*time.Second, func() bool { return tb.Counts(t)[outbox.StatusDelivered] == n },
		func() string {
			return fmt.Sprintf("%d events delivered after the reset; counts %v; log:\n%s", n, tb.Counts(t), r.log.String())
		})
	t.Logf("delivered %d events %s after the reset", n, time.Since(fixed).Round(time.Millisecond))
	eventually.True(t, 10*time.Second, func() bool {
		var code int
		code, rb = r.ready(t)
		return code == http.StatusOK && rb.Checks["engine"] == "ok"
	}, func() string { return fmt.Sprintf("/readyz 200 after the recovery; last %+v", rb) })
}
