package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outbox-relay/relay/internal/redact"
	"github.com/outbox-relay/relay/internal/telemetry"
	"github.com/outbox-relay/relay/pkg/relay"
	"github.com/outbox-relay/relay/pkg/storage"
)

// healthState is what the liveness probe reports.
type healthState struct {
	running atomic.Bool
}

func (h *healthState) setRunning(v bool) { h.running.Store(v) }

// httpDeps is what the HTTP endpoints read.
type httpDeps struct {
	health *healthState
	ready  *readiness
	// metrics serves /metrics; nil when Prometheus is not an exporter, and
	// metricsNote then says what is configured instead.
	metrics     http.Handler
	metricsNote string
	// backlog serves /stats; nil when the storage driver cannot read it.
	backlog *telemetry.BacklogPoller
}

func newHTTPServer(d httpDeps) *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !d.health.running.Load() {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "stopped"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		rep := d.ready.check()
		code := http.StatusOK
		if rep.Status != statusOK {
			code = http.StatusServiceUnavailable
		}
		writeJSON(w, code, rep)
	})
	if d.metrics != nil {
		mux.Handle("GET /metrics", d.metrics)
	} else {
		mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "metrics are not served here ("+d.metricsNote+"); set OTEL_METRICS_EXPORTER=prometheus", http.StatusNotFound)
		})
	}
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		if d.backlog == nil {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "this storage driver cannot read the backlog"})
			return
		}
		writeStats(w, d.backlog)
	})
	return &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
}

// Readiness timing: each check gets readyTimeout, and an answer is reused
// for readyCacheFor, so however often probes come the database and the
// broker see at most one check a second from each relay.
const (
	readyTimeout  = 2 * time.Second
	readyCacheFor = time.Second
)

// Readiness values.
const (
	statusOK          = "ok"
	statusUnavailable = "unavailable"
)

type storeChecker interface {
	Check(ctx context.Context) error
}
type brokerPinger interface {
	Ping(ctx context.Context) error
}
type engineStater interface {
	Health() (relay.State, error)
}

// readiness answers /readyz by asking the database and the broker
// themselves, not by looking at recent traffic: an idle relay is ready, and
// a relay whose broker went away is not, whether or not it had anything to
// send.
type readiness struct {
	store  storeChecker
	broker brokerPinger
	engine engineStater
	health *healthState
	// capture is the log reader under CAPTURE=wal or CAPTURE=binlog, nil
	// when polling; captureMode is the CAPTURE value that names it.
	capture     captureStater
	captureMode string
	// claimBound is the storage's claim bound, reported beside the
	// capture's state (storage.ClaimBound.BesideLog); nil when the
	// storage does not say.
	claimBound *storage.ClaimBound
	// cacheFor is how long an answer is reused; readyCacheFor but in tests.
	cacheFor time.Duration

	mu        sync.Mutex
	checkedAt time.Time
	last      readyReport
}

// readyReport is the /readyz body: every check is "ok" or says what is
// wrong, with any secret removed.
type readyReport struct {
	Status string            `json:"status"`
	Checks map[string]string `json:"checks"`
	// ClaimBound is the storage's claim bound (storage.ClaimBounder),
	// absent for a storage that does not say.
	ClaimBound *claimBoundJSON `json:"claim_bound,omitempty"`
}

// claimBoundJSON is storage.ClaimBound in /readyz: exact, or how long an
// event of a transaction that commits late may wait, why and what fixes
// it.
type claimBoundJSON struct {
	Exact                 bool     `json:"exact"`
	LateCommitWaitSeconds *float64 `json:"late_commit_wait_seconds,omitempty"`
	Why                   string   `json:"why,omitempty"`
	Fix                   string   `json:"fix,omitempty"`
}

func newClaimBoundJSON(b storage.ClaimBound) *claimBoundJSON {
	j := &claimBoundJSON{Exact: b.Exact, Why: b.Why, Fix: b.Fix}
	if !b.Exact {
		s := b.LateCommitWait.Seconds()
		j.LateCommitWaitSeconds = &s
	}
	return j
}

func newReadiness(store storeChecker, broker brokerPinger, engine engineStater, health *healthState) *readiness {
	return &readiness{store: store, broker: broker, engine: engine, health: health, cacheFor: readyCacheFor}
}

// check returns the cached answer if it is fresh, else checks again.
// Concurrent probes wait for one check instead of each starting their own.
func (r *readiness) check() readyReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.checkedAt.IsZero() && time.Since(r.checkedAt) < r.cacheFor {
		return r.last
	}
	// Not the request's context: a probe that gives up must not leave a
	// cancelled check in the cache.
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	var dbErr, brokerErr error
	var wg sync.WaitGroup
	wg.Go(func() { dbErr = r.store.Check(ctx) })
	wg.Go(func() { brokerErr = r.broker.Ping(ctx) })
	wg.Wait()

	rep := readyReport{Status: statusOK, Checks: map[string]string{
		"database": checkResult(dbErr),
		"broker":   checkResult(brokerErr),
		"engine":   r.engineResult(),
	}}
	streaming := false
	if r.capture != nil {
		rep.Checks["capture"] = captureResult(r.captureMode, r.capture)
		st, _ := r.capture.Status()
		streaming = st == relay.CaptureStreaming || st == relay.CaptureBackfilling
	}
	if r.claimBound != nil {
		rep.ClaimBound = newClaimBoundJSON(r.claimBound.BesideLog(streaming))
	}
	for _, v := range rep.Checks {
		if v != statusOK {
			rep.Status = statusUnavailable
		}
	}
	r.last, r.checkedAt = rep, time.Now()
	return rep
}

// engineResult is the engine's state, and for "error" why: "error: claim
// batch: …", so that a probe's answer names the database's complaint (a
// statement timeout, a read-only session) instead of leaving the operator to
// find it in the log.
func (r *readiness) engineResult() string {
	if !r.health.running.Load() {
		return "not running"
	}
	s, err := r.engine.Health()
	switch {
	case s == relay.StateActive:
		return statusOK
	case err != nil:
		return s.String() + ": " + redact.URL(err.Error())
	}
	return s.String()
}

// captureStater is the WAL reader's state (relay.Capture).
type captureStater interface {
	Status() (relay.CaptureState, error)
}

// captureResult is ok while the relay streams, backfills or stands by for
// another relay's stream; a lost slot or a stream that cannot open says so,
// and why: events then reach the broker only through polling.
func captureResult(mode string, c captureStater) string {
	s, err := c.Status()
	switch s {
	case relay.CaptureStreaming, relay.CaptureBackfilling, relay.CaptureStandby, relay.CaptureStarting:
		return statusOK
	}
	if err != nil {
		return mode + " " + string(s) + ": " + redact.URL(err.Error())
	}
	return mode + " " + string(s)
}

func checkResult(err error) string {
	if err == nil {
		return statusOK
	}
	return redact.URL(err.Error())
}

// statsBody is the /stats answer: the backlog poller's last reading.
type statsBody struct {
	Pending         int64 `json:"pending"`
	PendingNew      int64 `json:"pending_new"`
	PendingRetrying int64 `json:"pending_retrying"`
	Dead            int64 `json:"dead"`
	// OldestPendingAt is null when nothing is pending.
	OldestPendingAt         *time.Time `json:"oldest_pending_at"`
	OldestPendingAgeSeconds float64    `json:"oldest_pending_age_seconds"`
	ReadAt                  time.Time  `json:"read_at"`
	// Error says that the latest read failed; the numbers are from ReadAt.
	Error string `json:"error,omitempty"`
}

func writeStats(w http.ResponseWriter, p *telemetry.BacklogPoller) {
	r, ok, err := p.Last()
	if !ok {
		msg := "the backlog has not been read yet"
		if err != nil {
			msg = "reading the backlog failed: " + redact.URL(err.Error())
		}
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": statusUnavailable, "error": msg})
		return
	}
	body := statsBody{
		Pending:                 r.Pending(),
		PendingNew:              r.PendingNew,
		PendingRetrying:         r.PendingRetrying,
		Dead:                    r.Dead,
		OldestPendingAgeSeconds: r.OldestPendingAge.Seconds(),
		ReadAt:                  r.ReadAt,
	}
	if !r.OldestPendingAt.IsZero() {
		body.OldestPendingAt = &r.OldestPendingAt
	}
	if err != nil {
		body.Error = redact.URL(err.Error())
	}
	writeJSON(w, http.StatusOK, body)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// healthcheck asks the relay that the same environment configures for
// /healthz: the configuration is read as the relay reads it, so SERVER_PORT
// works too, and the configured host is dialled unless it listens on every
// interface.
func healthcheck(ctx context.Context, environ map[string]string, stderr io.Writer) int {
	cfg, err := loadConfig(environ)
	if err != nil {
		printConfigError(stderr, "relay healthcheck", err)
		return 2
	}
	host, port, _ := net.SplitHostPort(cfg.HTTPAddr) // validated by loadConfig
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(host, port)+"/healthz", nil)
	if err != nil {
		fmt.Fprintf(stderr, "relay healthcheck: %v\n", err)
		return 1
	}
	// No HTTP_PROXY: the relay is on this host, or next to it in the pod.
	client := &http.Client{Transport: &http.Transport{}}
	resp, err := client.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "relay healthcheck: %v\n", err)
		return 1
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "relay healthcheck: /healthz answered %s\n", resp.Status)
		return 1
	}
	return 0
}
