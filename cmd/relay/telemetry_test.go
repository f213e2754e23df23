package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/natstest"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/internal/syncbuf"
	"github.com/outbox-relay/relay/internal/telemetry"
	"github.com/outbox-relay/relay/pkg/outbox"
)

// liveRelay is a relay running in this process until the test ends.
type liveRelay struct {
	addr   string
	log    *syncbuf.Buffer
	cancel context.CancelFunc
	done   chan int
}

// startRelay runs the relay through run(), as the binary would, on a free
// HTTP port, and waits until /healthz answers 200.
func startRelay(t *testing.T, env map[string]string) *liveRelay {
	t.Helper()
	env["HTTP_ADDR"] = freeAddr(t)
	if env["LOG_FORMAT"] == "" {
		env["LOG_FORMAT"] = "text"
	}
	return launch(t, env["HTTP_ADDR"], func(ctx context.Context, log io.Writer) int {
		return run(ctx, nil, env, io.Discard, log)
	})
}

func launch(t *testing.T, addr string, start func(ctx context.Context, log io.Writer) int) *liveRelay {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &liveRelay{addr: addr, log: &syncbuf.Buffer{}, cancel: cancel, done: make(chan int, 1)}
	go func() { r.done <- start(ctx, r.log) }()
	t.Cleanup(func() {
		if code := r.stop(t); code != 0 {
			t.Errorf("relay exited %d; log:\n%s", code, r.log.String())
		}
	})
	eventually.True(t, 30*time.Second, func() bool {
		code, _ := r.get(t, "/healthz")
		return code == http.StatusOK
	}, func() string { return "/healthz 200; relay log:\n" + r.log.String() })
	return r
}

// stop ends the relay and returns its exit code; calling it again returns
// the same code.
func (r *liveRelay) stop(t *testing.T) int {
	t.Helper()
	r.cancel()
	select {
	case code := <-r.done:
		r.done <- code
		return code
	case <-time.After(60 * time.Second):
		t.Fatalf("relay did not stop within 60s; log:\n%s", r.log.String())
		return -1
	}
}

func (r *liveRelay) get(t *testing.T, path string) (int, []byte) {
	t.Helper()
	resp, err := http.Get("http://" + r.addr + path)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// scraped is one parse of /metrics.
type scraped map[string]*dto.MetricFamily

func (r *liveRelay) scrape(t *testing.T) scraped {
	t.Helper()
	code, body := r.get(t, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics answered %d: %s", code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, body)
	}
	return families
}

// value returns the counter or gauge value, or the histogram's count, of
// the series of name whose labels include kv; ok is false when there is no
// such series.
func (s scraped) value(name string, kv ...string) (v float64, ok bool) {
	f := s[name]
	if f == nil {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for i := 0; i+1 < len(kv); i += 2 {
			match = match && labels[kv[i]] == kv[i+1]
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			v += m.Counter.GetValue()
		case m.Gauge != nil:
			v += m.Gauge.GetValue()
		case m.Histogram != nil:
			v += float64(m.Histogram.GetSampleCount())
		}
		ok = true
	}
	return v, ok
}

func (s scraped) describe(names ...string) string {
	var b strings.Builder
	for _, n := range names {
		f := s[n]
		if f == nil {
			fmt.Fprintf(&b, "\n%s: absent", n)
			continue
		}
		for _, m := range f.GetMetric() {
			fmt.Fprintf(&b, "\n%s %v", n, m)
		}
	}
	return b.String()
}

// TestMetricsCountDeliveriesAndBacklog delivers N events through NATS and
// checks what Prometheus would scrape: N successes, an empty backlog, and
// the rest of the instruments alive.
func TestMetricsCountDeliveriesAndBacklog(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	srv := natstest.Start(t)
	st := srv.Stream(t, jetstream.StreamConfig{Name: "METRICS", Subjects: []string{"met.>"}})
	r := startRelay(t, map[string]string{
		"STORAGE_URL":      tb.URL,
		"PUBLISHER_URL":    srv.URL(),
		"RELAY_ID":         "metrics-relay-1",
		"BATCH_SIZE":       "50",
		"POLL_INTERVAL":    "50ms",
		"BACKLOG_INTERVAL": "100ms",
	})
	const n = 240
	tb.InsertN(t, n, "met.event")

	var last scraped
	eventually.True(t, 60*time.Second, func() bool {
		last = r.scrape(t)
		success, _ := last.value("openoutbox_events_total", "status", "success")
		if success != n {
			return false
		}
		for _, g := range [][]string{
			{"openoutbox_backlog_pending_count", "status", "new"},
			{"openoutbox_backlog_pending_count", "status", "retrying"},
			{"openoutbox_backlog_oldest_age_seconds"},
			{"openoutbox_backlog_dead_count"},
		} {
			if v, ok := last.value(g[0], g[1:]...); !ok || v != 0 {
				return false
			}
		}
		return true
	}, func() string {
		return "success counter at N and backlog gauges at 0; last scrape:" + last.describe(
			"openoutbox_events_total", "openoutbox_backlog_pending_count", "openoutbox_backlog_oldest_age_seconds",
			"openoutbox_backlog_dead_count") + "\nrelay log:\n" + r.log.String()
	})

	if got := natstest.Count(t, st); got != n {
		t.Errorf("stream holds %d messages, want %d", got, n)
	}
	m := r.scrape(t)
	for _, c := range []struct {
		what string
		kv   []string
		ok   func(float64) bool
	}{
		{"openoutbox_events_total", []string{"status", "failed"}, func(v float64) bool { return v == 0 }},
		{"openoutbox_events_total", []string{"status", "dead"}, func(v float64) bool { return v == 0 }},
		{"openoutbox_events_e2e_latency_seconds", nil, func(v float64) bool { return v == n }},
		{"openoutbox_events_batch_size", nil, func(v float64) bool { return v >= n/50 }},
		{"openoutbox_publisher_latency_seconds", []string{"status", "success"}, func(v float64) bool { return v >= n/50 }},
		{"openoutbox_storage_latency_seconds", []string{"op", "claim"}, func(v float64) bool { return v > 0 }},
		{"openoutbox_storage_latency_seconds", []string{"op", "mark_delivered", "status", "success"}, func(v float64) bool { return v >= n/50 }},
		{"openoutbox_storage_latency_seconds", []string{"op", "backlog"}, func(v float64) bool { return v > 0 }},
		{"openoutbox_storage_latency_seconds", []string{"op", "reap"}, func(v float64) bool { return v > 0 }},
		{"openoutbox_reaper_reclaimed_total", []string{"outcome", "requeued"}, func(v float64) bool { return v == 0 }},
		{"openoutbox_relay_state", nil, func(v float64) bool { return v == 1 }},
		// Every series says which broker, for dashboards split by it.
		{"openoutbox_relay_state", []string{"outbox_broker", "nats"}, func(v float64) bool { return v == 1 }},
		{"openoutbox_events_total", []string{"outbox_broker", "nats", "status", "success"}, func(v float64) bool { return v == n }},
		{"openoutbox_publisher_latency_seconds", []string{"outbox_broker", "nats"}, func(v float64) bool { return v >= n/50 }},
		{"target_info", []string{"service_instance_id", "metrics-relay-1", "service_name", "outbox-relay"}, func(v float64) bool { return v == 1 }},
	} {
		v, ok := m.value(c.what, c.kv...)
		if !ok || !c.ok(v) {
			t.Errorf("%s%v = %g (present %v)%s", c.what, c.kv, v, ok, m.describe(c.what))
		}
	}
	if sum := m["openoutbox_events_batch_size"].GetMetric()[0].GetHistogram().GetSampleSum(); sum != n {
		t.Errorf("batch sizes add up to %g, want %d", sum, n)
	}

	code, body := r.get(t, "/stats")
	var stats map[string]any
	if err := json.Unmarshal(body, &stats); code != http.StatusOK || err != nil {
		t.Fatalf("/stats: %d %s (%v)", code, body, err)
	}
	for _, k := range []string{"pending", "pending_new", "pending_retrying", "dead", "oldest_pending_age_seconds"} {
		if v, ok := stats[k].(float64); !ok || v != 0 {
			t.Errorf("/stats %s = %v, want 0: %s", k, stats[k], body)
		}
	}
	if stats["oldest_pending_at"] != nil || stats["read_at"] == nil {
		t.Errorf("/stats: %s", body)
	}
	if code := r.stop(t); code != 0 {
		t.Errorf("exit %d", code)
	}
}

type readyBody struct {
	Status     string            `json:"status"`
	Checks     map[string]string `json:"checks"`
	ClaimBound *struct {
		Exact bool `json:"exact"`
	} `json:"claim_bound"`
}

func (r *liveRelay) ready(t *testing.T) (int, readyBody) {
	t.Helper()
	code, body := r.get(t, "/readyz")
	var rb readyBody
	_ = json.Unmarshal(body, &rb)
	return code, rb
}

// TestReadinessFollowsTheBroker stops the NATS server under a running
// relay: /readyz turns 503 naming the broker within seconds while /healthz
// stays 200, and turns 200 again once the broker is back.
func TestReadinessFollowsTheBroker(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	srv := natstest.Start(t)
	r := startRelay(t, map[string]string{
		"STORAGE_URL":   tb.URL,
		"PUBLISHER_URL": srv.URL() + "?timeout=1s",
	})
	var code int
	var rb readyBody
	eventually.True(t, 30*time.Second, func() bool {
		code, rb = r.ready(t)
		return code == http.StatusOK && rb.Status == "ok" &&
			rb.Checks["database"] == "ok" && rb.Checks["broker"] == "ok" && rb.Checks["engine"] == "ok"
	}, func() string { return fmt.Sprintf("/readyz 200 with every check ok; got %d %+v", code, rb) })

	srv.Stop()
	// "Within a few seconds": each probe may take the 2 s check timeout
	// plus the 1 s cache.
	eventually.True(t, 10*time.Second, func() bool {
		code, rb = r.ready(t)
		return code == http.StatusServiceUnavailable && rb.Status == "unavailable" &&
			strings.Contains(rb.Checks["broker"], "nats") && rb.Checks["database"] == "ok"
	}, func() string {
		return fmt.Sprintf("/readyz 503 naming the broker within 10s of the outage; got %d %+v", code, rb)
	})
	if code, _ := r.get(t, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz answered %d during a broker outage; a liveness probe would restart a healthy relay", code)
	}

	srv.Restart()
	eventually.True(t, 30*time.Second, func() bool {
		code, rb = r.ready(t)
		return code == http.StatusOK && rb.Checks["broker"] == "ok"
	}, func() string { return fmt.Sprintf("/readyz 200 after the broker came back; got %d %+v", code, rb) })
}

// TestTraceparentReachesTheBrokerAndIsLinked writes a row whose headers
// carry a producer's W3C traceparent: the broker gets the header unchanged,
// and the exported publish span links to the producer's span.
func TestTraceparentReachesTheBrokerAndIsLinked(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	srv := natstest.Start(t)
	st := srv.Stream(t, jetstream.StreamConfig{Name: "TRACES", Subjects: []string{"tp.>"}})
	spans := tracetest.NewInMemoryExporter()
	cfg, err := loadConfig(map[string]string{
		"STORAGE_URL":   tb.URL,
		"PUBLISHER_URL": srv.URL(),
		"HTTP_ADDR":     freeAddr(t),
		"POLL_INTERVAL": "50ms",
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg.spanExporter = spans
	launch(t, cfg.HTTPAddr, func(ctx context.Context, log io.Writer) int {
		if err := serve(ctx, cfg, slog.New(slog.NewTextHandler(log, nil))); err != nil {
			fmt.Fprintln(log, "serve:", err)
			return 1
		}
		return 0
	})

	const (
		traceID     = "0af7651916cd43dd8448eb211c80319c"
		spanID      = "b7ad6b7169203331"
		traceparent = "00-" + traceID + "-" + spanID + "-01"
		tracestate  = "congo=t61rcWkgMzE"
	)
	ids := tb.Insert(t,
		pgtest.Event{Type: "tp.order.paid", Headers: `{"traceparent":"` + traceparent + `","tracestate":"` + tracestate + `"}`},
		pgtest.Event{Type: "tp.order.paid"})
	eventually.True(t, 30*time.Second, func() bool { return natstest.Count(t, st) == 2 },
		func() string { return "both events in the stream" })

	for _, m := range natstest.Messages(t, st) {
		got := m.Header.Values(outbox.HeaderTraceparent)
		switch m.Header.Get(outbox.HeaderEventID) {
		case ids[0].String():
			if len(got) != 1 || got[0] != traceparent {
				t.Errorf("traceparent at the broker %q, want %q unchanged", got, traceparent)
			}
			if ts := m.Header.Values("tracestate"); len(ts) != 1 || ts[0] != tracestate {
				t.Errorf("tracestate at the broker %q, want %q", ts, tracestate)
			}
		case ids[1].String():
			if len(got) != 0 {
				t.Errorf("the relay added traceparent %q to an event that had none", got)
			}
		default:
			t.Errorf("unexpected message %v", m.Header)
		}
	}

	var publish *tracetest.SpanStub
	eventually.True(t, 10*time.Second, func() bool {
		for _, s := range spans.GetSpans() {
			if s.Name == telemetry.SpanPublish {
				publish = &s
				return true
			}
		}
		return false
	}, func() string { return fmt.Sprintf("an exported publish span; have %d spans", len(spans.GetSpans())) })
	if len(publish.Links) != 1 {
		t.Fatalf("publish span has %d links, want 1: %+v", len(publish.Links), publish.Links)
	}
	link := publish.Links[0].SpanContext
	if link.TraceID().String() != traceID || link.SpanID().String() != spanID {
		t.Errorf("publish span links %s/%s, want the producer's %s/%s", link.TraceID(), link.SpanID(), traceID, spanID)
	}
	if publish.SpanContext.TraceID().String() == traceID {
		t.Errorf("the relay's span joined the producer's trace; it should only link to it")
	}
}

// TestTelemetryConfigErrorsExit2 checks that telemetry settings are
// validated with the rest.
func TestTelemetryConfigErrorsExit2(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, value, want string }{
		{"OTEL_METRICS_EXPORTER", "statsd", "OTEL_METRICS_EXPORTER"},
		{"OTEL_METRICS_EXPORTER", "none,prometheus", "OTEL_METRICS_EXPORTER"},
		{"OTEL_TRACES_EXPORTER", "jaeger", "OTEL_TRACES_EXPORTER"},
		{"OTEL_EXPORTER_OTLP_PROTOCOL", "http/json", "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "udp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"},
		{"BACKLOG_INTERVAL", "0s", "BACKLOG_INTERVAL must be positive"},
		{"BACKLOG_INTERVAL", "often", "BACKLOG_INTERVAL"},
	} {
		t.Run(c.name+"="+c.value, func(t *testing.T) {
			t.Parallel()
			code, _, stderr := runRelay(t, map[string]string{"HTTP_ADDR": "127.0.0.1:0", c.name: c.value})
			if code != 2 || !strings.Contains(stderr, c.want) {
				t.Errorf("exit %d, want 2 with a message naming %s:\n%s", code, c.want, stderr)
			}
		})
	}
}

// TestMetricsEndpointWithoutPrometheus: with OTEL_METRICS_EXPORTER=none,
// /metrics says why it has nothing, and the other endpoints still work.
func TestMetricsEndpointWithoutPrometheus(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	r := startRelay(t, map[string]string{
		"STORAGE_URL":           tb.URL,
		"PUBLISHER_URL":         "null://",
		"OTEL_METRICS_EXPORTER": "none",
		"BACKLOG_INTERVAL":      "50ms",
	})
	if code, body := r.get(t, "/metrics"); code != http.StatusNotFound || !strings.Contains(string(body), "OTEL_METRICS_EXPORTER=none") {
		t.Errorf("/metrics: %d %s", code, body)
	}
	eventually.True(t, 30*time.Second, func() bool {
		code, rb := r.ready(t)
		return code == http.StatusOK && rb.Status == "ok"
	}, func() string { return "/readyz 200 with the null publisher" })
	eventually.True(t, 30*time.Second, func() bool {
		code, _ := r.get(t, "/stats")
		return code == http.StatusOK
	}, func() string { return "/stats 200" })
}

// TestRetentionDeletesOnDeliveryAndPrunesDead runs the relay with
// DELIVERED_RETENTION=0 and DEAD_RETENTION=30d: delivered events leave no
// row, yet count as deliveries; a DEAD row past 30 days goes within
// seconds of the start, and a younger one, and PENDING work, stay.
func TestRetentionDeletesOnDeliveryAndPrunesDead(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	dead := tb.InsertN(t, 2, "ret.dead")
	tb.Exec(t, "UPDATE {{table}} SET status = 'DEAD', updated_at = now() - interval '31 days' WHERE event_id = $1", dead[0])
	tb.Exec(t, "UPDATE {{table}} SET status = 'DEAD', updated_at = now() - interval '29 days' WHERE event_id = $1", dead[1])
	later := tb.InsertN(t, 1, "ret.later")
	tb.Exec(t, "UPDATE {{table}} SET available_at = now() + interval '1 day', created_at = now() - interval '90 days' WHERE event_id = $1", later[0])
	r := startRelay(t, map[string]string{
		"STORAGE_URL":         tb.URL,
		"PUBLISHER_URL":       "null://",
		"BATCH_SIZE":          "50",
		"POLL_INTERVAL":       "50ms",
		"DELIVERED_RETENTION": "0",
		"DEAD_RETENTION":      "30d",
		"LOG_LEVEL":           "debug",
	})
	const n = 240
	tb.InsertN(t, n, "ret.event")
	var last scraped
	eventually.True(t, 60*time.Second, func() bool {
		last = r.scrape(t)
		success, _ := last.value("openoutbox_events_total", "status", "success")
		deleted, _ := last.value("openoutbox_retention_deleted_total", "status", "dead")
		return success == n && deleted == 1
	}, func() string {
		return "success at N and one DEAD row removed; last scrape:" + last.describe(
			"openoutbox_events_total", "openoutbox_retention_deleted_total") + "\nrelay log:\n" + r.log.String()
	})
	if got := tb.Counts(t); fmt.Sprint(got) != fmt.Sprint(map[outbox.Status]int{outbox.StatusPending: 1, outbox.StatusDead: 1}) {
		t.Errorf("rows left: %v, want the DEAD row younger than 30 days and the PENDING one", got)
	}
	if v, ok := last.value("openoutbox_storage_latency_seconds", "op", "delete_delivered", "status", "success"); !ok || v < n/50 {
		t.Errorf("delete_delivered statements: %g (present %v)", v, ok)
	}
	if _, ok := last.value("openoutbox_storage_latency_seconds", "op", "mark_delivered", "status", "success"); ok {
		t.Error("a delete-mode relay marked rows DELIVERED")
	}
	if log := r.log.String(); !strings.Contains(log, "retention cycle") || !strings.Contains(log, "deleted_dead=1") {
		t.Errorf("the retention cycle's log does not say what it removed:\n%s", r.log.String())
	}
	if code := r.stop(t); code != 0 {
		t.Errorf("exit %d", code)
	}
}
