package telemetry_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/relay/internal/fieldcheck"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/internal/syncbuf"
	"github.com/outbox-relay/relay/internal/telemetry"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/relay"
)

// setup returns a Telemetry that reports to a manual reader and an
// in-memory span exporter.
func setup(t *testing.T, cfg telemetry.Config) (*telemetry.Telemetry, *sdkmetric.ManualReader, *tracetest.InMemoryExporter) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewInMemoryExporter()
	if cfg.MetricsExporter == "" {
		cfg.MetricsExporter = telemetry.ExporterNone
	}
	cfg.MetricReader = reader
	cfg.SpanExporter = spans
	tel, err := telemetry.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	return tel, reader, spans
}

// metrics is one collection, by instrument name.
type metrics map[string]metricdata.Aggregation

func collect(t *testing.T, r *sdkmetric.ManualReader) metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	m := metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			m[mt.Name] = mt.Data
		}
	}
	return m
}

// matches reports whether set has every key=value of kv.
func matches(set attribute.Set, kv []string) bool {
	for i := 0; i+1 < len(kv); i += 2 {
		v, ok := set.Value(attribute.Key(kv[i]))
		if !ok || v.String() != kv[i+1] {
			return false
		}
	}
	return true
}

// value returns the counter or gauge point of name with the attributes kv,
// and whether there is one.
func (m metrics) value(name string, kv ...string) (float64, bool) {
	switch d := m[name].(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			if matches(p.Attributes, kv) {
				return float64(p.Value), true
			}
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			if matches(p.Attributes, kv) {
				return float64(p.Value), true
			}
		}
	case metricdata.Gauge[float64]:
		for _, p := range d.DataPoints {
			if matches(p.Attributes, kv) {
				return p.Value, true
			}
		}
	}
	return 0, false
}

func (m metrics) mustValue(t *testing.T, name string, kv ...string) float64 {
	t.Helper()
	v, ok := m.value(name, kv...)
	if !ok {
		t.Fatalf("no %s point with %v; have %v", name, kv, m[name])
	}
	return v
}

// histogram returns the count and sum of the histogram points of name with
// the attributes kv.
func (m metrics) histogram(name string, kv ...string) (count uint64, sum float64) {
	switch d := m[name].(type) {
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			if matches(p.Attributes, kv) {
				count += p.Count
				sum += p.Sum
			}
		}
	case metricdata.Histogram[int64]:
		for _, p := range d.DataPoints {
			if matches(p.Attributes, kv) {
				count += p.Count
				sum += float64(p.Sum)
			}
		}
	}
	return count, sum
}

func spansNamed(spans tracetest.SpanStubs, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func attrOf(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

const (
	producerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	producerSpan  = "00f067aa0ba902b7"
)

func TestObserverRecordsABatch(t *testing.T) {
	t.Parallel()
	tel, reader, exp := setup(t, telemetry.Config{})
	o := tel.EngineObserver()
	ctx := context.Background()

	// An empty claim is timed but leaves no span and no batch size.
	_, end := o.StartClaim(ctx)
	end(0, nil)
	if spans := exp.GetSpans(); len(spans) != 0 {
		t.Fatalf("an empty claim made spans: %v", spans)
	}
	m := collect(t, reader)
	if n, _ := m.histogram(telemetry.MetricStorageLatency, "op", "claim", "status", "success"); n != 1 {
		t.Errorf("claim latency count %d, want 1", n)
	}
	if n, _ := m.histogram(telemetry.MetricBatchSize); n != 0 {
		t.Errorf("batch size recorded for an empty claim")
	}

	// A batch of four: two carry the same producer's traceparent, one a
	// malformed one, one none.
	tp := fmt.Sprintf(`{"traceparent": "00-%s-%s-01", "content-type": "application/json"}`, producerTrace, producerSpan)
	created := time.Now().Add(-2 * time.Second)
	events := []outbox.Event{
		{Type: "a", Headers: []byte(tp), CreatedAt: created},
		{Type: "a", Headers: []byte(tp), CreatedAt: created},
		{Type: "a", Headers: []byte(`{"traceparent": "garbage"}`), CreatedAt: created},
		{Type: "a", Headers: []byte(`{}`), CreatedAt: created},
	}
	bctx, end := o.StartClaim(ctx)
	end(len(events), nil)
	_, endPublish := o.StartPublish(bctx, events)
	endPublish([]error{nil, nil, nil, errors.New("stream full")})
	_, endSettle := o.StartSettle(bctx, relay.OpMarkDelivered, 3)
	endSettle(nil)
	_, endSettle = o.StartSettle(bctx, relay.OpMarkFailed, 1)
	endSettle(errors.New("connection reset"))
	o.Finished(bctx, relay.Outcome{Delivered: 3, Failed: 1})
	o.StateChanged(relay.StatePaused)

	m = collect(t, reader)
	for status, want := range map[string]float64{"success": 3, "failed": 1, "dead": 0} {
		if got := m.mustValue(t, telemetry.MetricEventsTotal, "status", status); got != want {
			t.Errorf("events.total{status=%s} = %g, want %g", status, got, want)
		}
	}
	if n, sum := m.histogram(telemetry.MetricE2ELatency); n != 3 || sum < 6 {
		t.Errorf("e2e latency: %d values summing to %g, want 3 of about 2 s each", n, sum)
	}
	if n, sum := m.histogram(telemetry.MetricBatchSize); n != 1 || sum != 4 {
		t.Errorf("batch size: count %d sum %g, want one batch of 4", n, sum)
	}
	if n, _ := m.histogram(telemetry.MetricPublisherLatency, "status", "failed"); n != 1 {
		t.Errorf("publisher latency with a failure: count %d, want 1", n)
	}
	if n, _ := m.histogram(telemetry.MetricStorageLatency, "op", "mark_delivered", "status", "success"); n != 1 {
		t.Errorf("mark_delivered latency count %d, want 1", n)
	}
	if n, _ := m.histogram(telemetry.MetricStorageLatency, "op", "mark_failed", "status", "error"); n != 1 {
		t.Errorf("mark_failed error latency count %d, want 1", n)
	}
	if got := m.mustValue(t, telemetry.MetricRelayState); got != float64(relay.StatePaused) {
		t.Errorf("relay.state = %g, want %d (paused)", got, relay.StatePaused)
	}
	if _, ok := m.value(telemetry.MetricPendingCount); ok {
		t.Errorf("backlog gauges reported without a backlog poller")
	}

	spans := exp.GetSpans()
	roots := spansNamed(spans, telemetry.SpanBatch)
	if len(roots) != 1 {
		t.Fatalf("%d batch spans, want 1: %v", len(roots), spans)
	}
	root := roots[0]
	if got := attrOf(root, "outbox.events.delivered"); got != "3" {
		t.Errorf("batch span says %s delivered, want 3", got)
	}
	for _, name := range []string{telemetry.SpanClaim, telemetry.SpanPublish, telemetry.SpanSettle} {
		for _, s := range spansNamed(spans, name) {
			if s.Parent.SpanID() != root.SpanContext.SpanID() || s.SpanContext.TraceID() != root.SpanContext.TraceID() {
				t.Errorf("%s span is not a child of the batch span", name)
			}
		}
	}
	if n := len(spansNamed(spans, telemetry.SpanSettle)); n != 2 {
		t.Errorf("%d settle spans, want 2", n)
	}
	pubs := spansNamed(spans, telemetry.SpanPublish)
	if len(pubs) != 1 {
		t.Fatalf("%d publish spans, want 1", len(pubs))
	}
	pub := pubs[0]
	if pub.SpanKind != trace.SpanKindProducer {
		t.Errorf("publish span kind %v, want producer", pub.SpanKind)
	}
	if pub.Status.Code != codes.Error || !strings.Contains(pub.Status.Description, "stream full") {
		t.Errorf("publish span status %+v, want an error naming the failure", pub.Status)
	}
	if len(pub.Links) != 1 {
		t.Fatalf("publish span has %d links, want 1 (one producer span, deduplicated): %+v", len(pub.Links), pub.Links)
	}
	l := pub.Links[0].SpanContext
	if l.TraceID().String() != producerTrace || l.SpanID().String() != producerSpan || !l.IsRemote() {
		t.Errorf("link to %s/%s (remote %v), want %s/%s", l.TraceID(), l.SpanID(), l.IsRemote(), producerTrace, producerSpan)
	}
	if l.TraceID() == root.SpanContext.TraceID() {
		t.Errorf("the batch joined the producer's trace instead of linking it")
	}
}

func TestFailedClaimIsASpanWithAnError(t *testing.T) {
	t.Parallel()
	tel, reader, exp := setup(t, telemetry.Config{})
	_, end := tel.EngineObserver().StartClaim(context.Background())
	end(0, errors.New("cannot reach PostgreSQL"))
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].Name != telemetry.SpanClaim || spans[0].Status.Code != codes.Error {
		t.Fatalf("spans %+v, want one failed claim span", spans)
	}
	m := collect(t, reader)
	if n, _ := m.histogram(telemetry.MetricStorageLatency, "op", "claim", "status", "error"); n != 1 {
		t.Errorf("failed claim latency count %d, want 1", n)
	}
}

func TestNoTracesExporterRecordsNoSpans(t *testing.T) {
	t.Parallel()
	tel, err := telemetry.New(context.Background(), telemetry.Config{MetricsExporter: "none", TracesExporter: "none"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tel.Shutdown(context.Background()) }()
	o := tel.EngineObserver()
	bctx, end := o.StartClaim(context.Background())
	end(1, nil)
	ctx, endPublish := o.StartPublish(bctx, []outbox.Event{{Headers: []byte(`{"traceparent":"00-` + producerTrace + `-` + producerSpan + `-01"}`)}})
	if trace.SpanFromContext(ctx).IsRecording() {
		t.Errorf("a span is recorded with OTEL_TRACES_EXPORTER=none")
	}
	endPublish([]error{nil})
	o.Finished(bctx, relay.Outcome{})
	if tel.MetricsHandler() != nil {
		t.Errorf("a /metrics handler with OTEL_METRICS_EXPORTER=none")
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	good := []telemetry.Config{
		{},
		{MetricsExporter: "prometheus", TracesExporter: "none"},
		{MetricsExporter: "prometheus,otlp", TracesExporter: "otlp, console", OTLPMetricsProtocol: "grpc", OTLPTracesProtocol: "http/protobuf"},
		{MetricsExporter: "none", TracesExporter: "console"},
	}
	for _, c := range good {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	bad := []struct {
		cfg  telemetry.Config
		want string
	}{
		{telemetry.Config{MetricsExporter: "statsd"}, `telemetry: MetricsExporter: unknown exporter "statsd"; use prometheus, otlp or none`},
		{telemetry.Config{MetricsExporter: "console"}, "telemetry: MetricsExporter: unknown exporter"},
		{telemetry.Config{MetricsExporter: "none,otlp"}, "telemetry: MetricsExporter: none cannot be combined"},
		{telemetry.Config{TracesExporter: "jaeger"}, "telemetry: TracesExporter: unknown exporter"},
		{telemetry.Config{TracesExporter: "prometheus"}, "telemetry: TracesExporter: unknown exporter"},
		{telemetry.Config{OTLPMetricsProtocol: "http/json"}, "telemetry: OTLPMetricsProtocol must be grpc or http/protobuf"},
		{telemetry.Config{OTLPTracesProtocol: "udp"}, `telemetry: OTLPTracesProtocol must be grpc or http/protobuf (http/json is not supported), got "udp"`},
		{telemetry.Config{BacklogInterval: -time.Second}, "telemetry: BacklogInterval must be positive, got -1s"},
	}
	for _, c := range bad {
		err := c.cfg.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %s", c.cfg, err, c.want)
		}
		var fe *fieldcheck.FieldError
		if !errors.As(err, &fe) || strings.Contains(err.Error(), "OTEL_") {
			t.Errorf("%v does not name the field alone", err)
		}
		if _, err := telemetry.New(context.Background(), c.cfg); err == nil {
			t.Errorf("New accepted %+v", c.cfg)
		}
	}
}

// scrape serves the Prometheus handler once and parses what it wrote.
func scrape(t *testing.T, tel *telemetry.Telemetry) (string, map[string]bool) {
	t.Helper()
	h := tel.MetricsHandler()
	if h == nil {
		t.Fatal("no /metrics handler with the prometheus exporter")
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := rec.Body.String()
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, body)
	}
	names := map[string]bool{}
	for name := range families {
		names[name] = true
	}
	return body, names
}

// prometheusNames are the names Open Outbox's dashboards query, and ours.
var prometheusNames = []string{
	"openoutbox_events_total",
	"openoutbox_events_e2e_latency_seconds",
	"openoutbox_events_batch_size",
	"openoutbox_storage_latency_seconds",
	"openoutbox_publisher_latency_seconds",
	"openoutbox_backlog_pending_count",
	"openoutbox_backlog_oldest_age_seconds",
	"openoutbox_relay_state",
	"openoutbox_backlog_dead_count",
	"openoutbox_reaper_reclaimed_total",
	"openoutbox_retention_deleted_total",
	"target_info",
}

// walPrometheusNames are the names CAPTURE=wal adds.
var walPrometheusNames = []string{
	"openoutbox_wal_retained_bytes",
	"openoutbox_wal_streaming",
	"openoutbox_wal_slot_recreated_total",
}

// TestWALPrometheusNames pins the names of CAPTURE=wal's metrics, as
// deploy/ and docs/metrics.md spell them, and what they report.
func TestWALPrometheusNames(t *testing.T) {
	t.Parallel()
	tel, err := telemetry.New(context.Background(), telemetry.Config{InstanceID: "relay-7"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tel.Shutdown(context.Background()) }()
	o, err := tel.CaptureObserver(func(context.Context) (int64, bool, error) { return 4096, true, nil }, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	o.CaptureStateChanged(relay.CaptureStreaming, nil)
	o.SlotRecreated()
	body, names := scrape(t, tel)
	for _, n := range walPrometheusNames {
		if !names[n] {
			t.Errorf("/metrics lacks %s:\n%s", n, body)
		}
	}
	for _, line := range []string{"openoutbox_wal_retained_bytes{", "} 4096", "openoutbox_wal_streaming{", "openoutbox_wal_slot_recreated_total{"} {
		if !strings.Contains(body, line) {
			t.Errorf("/metrics lacks %q", line)
		}
	}
	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range walPrometheusNames {
		if !bytes.Contains(doc, []byte("`"+n+"`")) {
			t.Errorf("docs/metrics.md does not document %s", n)
		}
	}
}

// TestPrometheusNamesAreOpenOutboxs pins the names the exporter derives from
// the instruments (dots to underscores, unit and _total suffixes), since
// dashboards and alerts depend on them, and checks docs/metrics.md names
// every one.
func TestPrometheusNamesAreOpenOutboxs(t *testing.T) {
	t.Parallel()
	tel, err := telemetry.New(context.Background(), telemetry.Config{InstanceID: "relay-7", ServiceVersion: "v1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tel.Shutdown(context.Background()) }()
	o := tel.EngineObserver()
	bctx, end := o.StartClaim(context.Background())
	end(1, nil)
	_, endPublish := o.StartPublish(bctx, []outbox.Event{{CreatedAt: time.Now()}})
	endPublish([]error{nil})
	o.Finished(bctx, relay.Outcome{Delivered: 1})
	tb := pgtest.New(t)
	tb.InsertN(t, 1, "names.test")
	p := tel.PollBacklog(tb.Store, nil)
	if err := p.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}

	body, names := scrape(t, tel)
	var ours []string
	for name := range names {
		if strings.HasPrefix(name, "openoutbox_") || name == "target_info" {
			ours = append(ours, name)
		}
	}
	slices.Sort(ours)
	want := slices.Sorted(slices.Values(prometheusNames))
	if !slices.Equal(ours, want) {
		t.Errorf("Prometheus names:\n got %v\nwant %v", ours, want)
	}
	for _, line := range []string{
		`openoutbox_events_total{otel_scope_name="github.com/outbox-relay/relay",otel_scope_schema_url="",otel_scope_version="",status="success"} 1`,
		`openoutbox_events_total{otel_scope_name="github.com/outbox-relay/relay",otel_scope_schema_url="",otel_scope_version="",status="dead"} 0`,
		`openoutbox_backlog_pending_count{otel_scope_name="github.com/outbox-relay/relay",otel_scope_schema_url="",otel_scope_version="",status="new"} 1`,
		`service_instance_id="relay-7"`,
		`service_name="outbox-relay"`,
		`service_version="v1.2.3"`,
		`openoutbox_events_e2e_latency_seconds_bucket{`,
	} {
		if !strings.Contains(body, line) {
			t.Errorf("/metrics lacks %s", line)
		}
	}

	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range prometheusNames {
		if !bytes.Contains(doc, []byte("`"+name+"`")) {
			t.Errorf("docs/metrics.md does not document %s", name)
		}
	}
	for _, name := range []string{
		telemetry.MetricEventsTotal, telemetry.MetricE2ELatency, telemetry.MetricBatchSize,
		telemetry.MetricStorageLatency, telemetry.MetricPublisherLatency, telemetry.MetricPendingCount,
		telemetry.MetricOldestAge, telemetry.MetricRelayState, telemetry.MetricDeadCount, telemetry.MetricReaperReclaimed,
		telemetry.MetricRetentionDeleted, telemetry.MetricRetentionPartitions, telemetry.MetricRetentionPartitionsKept,
	} {
		if !bytes.Contains(doc, []byte("`"+name+"`")) {
			t.Errorf("docs/metrics.md does not name the instrument %s", name)
		}
	}
}

// TestBrokerLabelsEverySeries: Config.Broker is a label on every series of
// the relay's own, and on target_info, for dashboards split by broker.
func TestBrokerLabelsEverySeries(t *testing.T) {
	t.Parallel()
	tel, err := telemetry.New(context.Background(), telemetry.Config{Broker: "webhook"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tel.Shutdown(context.Background()) }()
	o := tel.EngineObserver()
	bctx, end := o.StartClaim(context.Background())
	end(1, nil)
	_, endPublish := o.StartPublish(bctx, []outbox.Event{{CreatedAt: time.Now()}})
	endPublish([]error{nil})
	o.Finished(bctx, relay.Outcome{Delivered: 1})

	body, _ := scrape(t, tel)
	n := 0
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, "openoutbox_") && !strings.HasPrefix(line, "target_info") {
			continue
		}
		n++
		if !strings.Contains(line, `outbox_broker="webhook"`) {
			t.Errorf("series without outbox_broker: %s", line)
		}
	}
	if n == 0 {
		t.Fatalf("no series of the relay's own:\n%s", body)
	}
}

// TestShippedRulesAndDashboardQueryRealNames keeps deploy/ in step with the
// names the relay exports.
func TestShippedRulesAndDashboardQueryRealNames(t *testing.T) {
	t.Parallel()
	known := map[string]bool{}
	for _, n := range append(slices.Clone(prometheusNames), walPrometheusNames...) {
		known[n] = true
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			known[n+suffix] = true
		}
	}
	ident := regexp.MustCompile(`openoutbox_[a-z0-9_]+`)
	for _, path := range []string{"../../deploy/prometheus/alerts.yml", "../../deploy/grafana/dashboards/outbox-relay.json"} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		used := 0
		for _, name := range ident.FindAllString(string(b), -1) {
			used++
			if !known[name] {
				t.Errorf("%s queries %s, which the relay does not export", path, name)
			}
		}
		if used == 0 {
			t.Errorf("%s queries no relay metric", path)
		}
		if strings.HasSuffix(path, ".json") && !strings.Contains(string(b), `outbox_broker=~\"$broker\"`) {
			t.Errorf("%s does not select by the outbox_broker label", path)
		}
	}
}

// TestConsoleExporterWritesSpans checks OTEL_TRACES_EXPORTER=console: spans
// are flushed to the writer on Shutdown.
func TestConsoleExporterWritesSpans(t *testing.T) {
	t.Parallel()
	var out syncbuf.Buffer
	tel, err := telemetry.New(context.Background(), telemetry.Config{MetricsExporter: "none", TracesExporter: "console", Console: &out})
	if err != nil {
		t.Fatal(err)
	}
	o := tel.EngineObserver()
	bctx, end := o.StartClaim(context.Background())
	end(1, nil)
	_, endPublish := o.StartPublish(bctx, []outbox.Event{{Headers: []byte(`{"traceparent":"00-` + producerTrace + `-` + producerSpan + `-01"}`)}})
	endPublish([]error{nil})
	o.Finished(bctx, relay.Outcome{})
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{`"Name":"outbox.publish"`, `"Name":"outbox.batch"`, producerTrace} {
		if !strings.Contains(s, want) {
			t.Errorf("console output lacks %s:\n%s", want, s)
		}
	}
}

// TestOTLPUsesTheStandardVariables points OTEL_EXPORTER_OTLP_ENDPOINT at a
// local HTTP server and checks that metrics and spans arrive there over
// http/protobuf. Not parallel: it sets the environment.
func TestOTLPUsesTheStandardVariables(t *testing.T) {
	var mu sync.Mutex
	got := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		got[r.URL.Path+" "+r.Header.Get("Content-Type")+" "+r.Header.Get("X-Tenant")]++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "X-Tenant=acme")

	tel, err := telemetry.New(context.Background(), telemetry.Config{MetricsExporter: "otlp", TracesExporter: "otlp"})
	if err != nil {
		t.Fatal(err)
	}
	o := tel.EngineObserver()
	bctx, end := o.StartClaim(context.Background())
	end(1, nil)
	o.Finished(bctx, relay.Outcome{Delivered: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, want := range []string{"/v1/metrics application/x-protobuf acme", "/v1/traces application/x-protobuf acme"} {
		if got[want] == 0 {
			t.Errorf("no request %q; got %v", want, got)
		}
	}
}
