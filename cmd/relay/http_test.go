package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/natstest"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/relay"
)

// engineState stands in for the engine, whose state is what is under test
// here; the database and the broker are real.
type engineState struct {
	s   atomic.Int32
	err atomic.Pointer[error]
}

func (e *engineState) Health() (relay.State, error) {
	if err := e.err.Load(); err != nil {
		return relay.State(e.s.Load()), *err
	}
	return relay.State(e.s.Load()), nil
}

func readyz(t *testing.T, h http.Handler) (int, readyBody) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	var rb readyBody
	if err := json.Unmarshal(rec.Body.Bytes(), &rb); err != nil {
		t.Fatalf("/readyz body %q: %v", rec.Body.String(), err)
	}
	return rec.Code, rb
}

// TestReadyzNamesWhatIsDown checks every reason /readyz gives: a paused or
// failing engine, a relay that is not running its loops, a table that is
// gone. A paused engine must take the relay out of service even while the
// broker answers a ping: the engine has not resumed yet.
func TestReadyzNamesWhatIsDown(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	srv := natstest.Start(t)
	pub, err := publisher.Open(context.Background(), srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close(context.Background())

	engine := &engineState{}
	engine.s.Store(int32(relay.StateActive))
	health := &healthState{}
	health.setRunning(true)
	// A new readiness per step, so no cached answer hides the change.
	handler := func() http.Handler {
		return newHTTPServer(httpDeps{health: health, ready: newReadiness(tb.Store, pub, engine, health),
			metricsNote: "OTEL_METRICS_EXPORTER=otlp"}).Handler
	}
	eventually.True(t, 10*time.Second, func() bool {
		code, _ := readyz(t, handler())
		return code == http.StatusOK
	}, func() string { return "/readyz 200 once the publisher connected" })

	for _, c := range []struct {
		state relay.State
		want  string
	}{{relay.StatePaused, "paused"}, {relay.StateError, "error"}} {
		engine.s.Store(int32(c.state))
		code, rb := readyz(t, handler())
		if code != http.StatusServiceUnavailable || rb.Status != "unavailable" || rb.Checks["engine"] != c.want ||
			rb.Checks["database"] != "ok" || rb.Checks["broker"] != "ok" {
			t.Errorf("engine %s: /readyz %d %+v", c.state, code, rb)
		}
	}

	// A failing engine says why, without the password of a URL the error
	// quotes.
	claimErr := errors.New("claim batch: cannot reach postgres://relay:" + secret + "@db:5432/app: canceling statement due to statement timeout (SQLSTATE 57014)")
	engine.err.Store(&claimErr)
	code, rb := readyz(t, handler())
	if want := "error: claim batch: cannot reach postgres://relay:xxxxx@db:5432/app: canceling statement due to statement timeout (SQLSTATE 57014)"; code != http.StatusServiceUnavailable || rb.Checks["engine"] != want {
		t.Errorf("engine error with a reason: /readyz %d %+v, want engine %q", code, rb, want)
	}
	engine.err.Store(nil)
	engine.s.Store(int32(relay.StateActive))

	health.setRunning(false)
	if code, rb := readyz(t, handler()); code != http.StatusServiceUnavailable || rb.Checks["engine"] != "not running" {
		t.Errorf("stopped relay: /readyz %d %+v", code, rb)
	}
	health.setRunning(true)

	tb.Exec(t, "DROP TABLE {{table}}")
	if code, rb := readyz(t, handler()); code != http.StatusServiceUnavailable || !strings.Contains(rb.Checks["database"], "migrate") {
		t.Errorf("dropped table: /readyz %d %+v", code, rb)
	}

	// Without a Prometheus exporter or a backlog reader, /metrics and
	// /stats say so.
	rec := httptest.NewRecorder()
	handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), "OTEL_METRICS_EXPORTER=otlp") {
		t.Errorf("/metrics without Prometheus: %d %s", rec.Code, rec.Body.String())
	}
	rec = httptest.NewRecorder()
	handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/stats", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("/stats without a backlog reader: %d %s", rec.Code, rec.Body.String())
	}
}

// TestReadyzCachesItsAnswer checks that probes within the cache window
// share one check, and that the answer is checked again after it.
func TestReadyzCachesItsAnswer(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	srv := natstest.Start(t)
	pub, err := publisher.Open(context.Background(), srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close(context.Background())
	engine := &engineState{}
	engine.s.Store(int32(relay.StateActive))
	health := &healthState{}
	health.setRunning(true)
	rd := newReadiness(tb.Store, pub, engine, health)
	rd.cacheFor = 0 // check every time until the publisher is connected
	eventually.True(t, 10*time.Second, func() bool { return rd.check().Status == statusOK },
		func() string { return "ready once the publisher connected" })

	// A window long enough that no scheduling hiccup ends it: a change is
	// not seen while the answer is cached.
	rd.cacheFor = time.Hour
	engine.s.Store(int32(relay.StatePaused))
	if rep := rd.check(); rep.Status != statusOK {
		t.Errorf("a probe inside the cache window checked again: %+v", rep)
	}
	rd.cacheFor = readyCacheFor
	eventually.True(t, 5*time.Second, func() bool { return rd.check().Checks["engine"] == "paused" },
		func() string { return "the cached answer expires after readyCacheFor" })
}
