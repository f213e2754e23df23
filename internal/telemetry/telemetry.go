// Package telemetry makes the relay observable with OpenTelemetry: it sets
// up the meter and tracer providers and their exporters (a Prometheus
// scrape handler, OTLP, the console), creates the instruments under Open
// Outbox Relay's names so its dashboards keep working, and implements the
// observer of each of the relay's components, one file each: engine.go
// (relay.Observer: metrics and a trace per batch), capture.go
// (relay.CaptureObserver, CAPTURE=wal), reaper.go (reaper.Observer) and
// retention.go (retention.Observer). backlog.go polls the table's backlog
// for the gauges. A component's metric or span is added in its file alone.
//
// Nothing here reads the environment: cmd/relay passes the exporter choices
// in Config. Only the OpenTelemetry SDK and its exporters read their own
// standard variables (OTEL_EXPORTER_OTLP_*, OTEL_RESOURCE_ATTRIBUTES,
// OTEL_TRACES_SAMPLER, OTEL_METRIC_EXPORT_INTERVAL, OTEL_BSP_*, ...).
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/outbox-relay/relay/internal/fieldcheck"
)

// Exporter names, as OTEL_METRICS_EXPORTER and OTEL_TRACES_EXPORTER take
// them.
const (
	ExporterPrometheus = "prometheus"
	ExporterOTLP       = "otlp"
	ExporterConsole    = "console"
	ExporterNone       = "none"
)

// OTLP protocols, as OTEL_EXPORTER_OTLP_PROTOCOL takes them.
const (
	ProtocolGRPC         = "grpc"
	ProtocolHTTPProtobuf = "http/protobuf"
)

// Defaults for Config.
const (
	ServiceNameDefault     = "outbox-relay"
	MetricsExporterDefault = ExporterPrometheus
	TracesExporterDefault  = ExporterNone
	// OTLPProtocolDefault is the specification's default; the collector
	// listens for it on port 4318.
	OTLPProtocolDefault = ProtocolHTTPProtobuf
)

// scopeName is the instrumentation scope of every instrument and span.
const scopeName = "github.com/outbox-relay/relay"

// Config chooses what is exported where. Zero fields take their XxxDefault.
type Config struct {
	// ServiceName, ServiceVersion and InstanceID become the resource's
	// service.name, service.version and service.instance.id.
	ServiceName    string
	ServiceVersion string
	InstanceID     string
	// Broker names the kind of broker the relay publishes to (nats, kafka,
	// rabbitmq, redis, webhook, stdout, null). It becomes the resource's
	// outbox.broker and, on /metrics, an outbox_broker label on every
	// series, so dashboards can tell brokers apart; empty leaves both out.
	Broker string
	// MetricsExporter is a comma-separated list of prometheus (served by
	// MetricsHandler) and otlp, or none.
	MetricsExporter string
	// TracesExporter is a comma-separated list of otlp and console, or
	// none.
	TracesExporter string
	// OTLPMetricsProtocol and OTLPTracesProtocol are grpc or
	// http/protobuf.
	OTLPMetricsProtocol string
	OTLPTracesProtocol  string
	// BacklogInterval is how often PollBacklog's poller reads the backlog.
	BacklogInterval time.Duration
	// Console receives the console trace exporter's spans, one JSON object
	// each; nil means stderr, so that a stdout:// publisher's output stays
	// clean.
	Console io.Writer
	// Logger receives export failures; nil discards them.
	Logger *slog.Logger

	// MetricReader and SpanExporter, when set, receive everything in
	// addition to the exporters above: tests use a manual reader and an
	// in-memory exporter. Spans go to SpanExporter as each one ends.
	MetricReader sdkmetric.Reader
	SpanExporter sdktrace.SpanExporter
}

func (c Config) withDefaults() Config {
	if c.ServiceName == "" {
		c.ServiceName = ServiceNameDefault
	}
	if c.MetricsExporter == "" {
		c.MetricsExporter = MetricsExporterDefault
	}
	if c.TracesExporter == "" {
		c.TracesExporter = TracesExporterDefault
	}
	if c.OTLPMetricsProtocol == "" {
		c.OTLPMetricsProtocol = OTLPProtocolDefault
	}
	if c.OTLPTracesProtocol == "" {
		c.OTLPTracesProtocol = OTLPProtocolDefault
	}
	fieldcheck.Default(&c.BacklogInterval, BacklogIntervalDefault)
	if c.Console == nil {
		c.Console = os.Stderr
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports every field that cannot work, by its Go name. Zero
// fields are valid: they take their defaults.
func (c Config) Validate() error {
	v := fieldcheck.Check("telemetry")
	_, err := exporterList(c.MetricsExporter, ExporterPrometheus, ExporterOTLP)
	v.Wrap("MetricsExporter", err)
	_, err = exporterList(c.TracesExporter, ExporterOTLP, ExporterConsole)
	v.Wrap("TracesExporter", err)
	v.Expect("OTLPMetricsProtocol", otlpProtocol(c.OTLPMetricsProtocol),
		"must be grpc or http/protobuf (http/json is not supported), got %q", c.OTLPMetricsProtocol)
	v.Expect("OTLPTracesProtocol", otlpProtocol(c.OTLPTracesProtocol),
		"must be grpc or http/protobuf (http/json is not supported), got %q", c.OTLPTracesProtocol)
	v.Expect("BacklogInterval", c.BacklogInterval >= 0, "must be positive, got %s", c.BacklogInterval)
	return v.Err()
}

// otlpProtocol reports whether p is an OTLP protocol the exporters speak,
// or empty for the default.
func otlpProtocol(p string) bool { return p == "" || p == ProtocolGRPC || p == ProtocolHTTPProtobuf }

// exporterList splits a comma-separated exporter list; none stands alone
// and means an empty list.
func exporterList(s string, allowed ...string) ([]string, error) {
	var out []string
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		switch {
		case name == "":
		case name == ExporterNone:
			if strings.TrimSpace(s) != ExporterNone {
				return nil, fmt.Errorf("none cannot be combined with other exporters, got %q", s)
			}
		case slices.Contains(allowed, name):
			if !slices.Contains(out, name) {
				out = append(out, name)
			}
		default:
			return nil, fmt.Errorf("unknown exporter %q; use %s or none", name, strings.Join(allowed, ", "))
		}
	}
	return out, nil
}

// Telemetry owns the providers and instruments of one relay process.
type Telemetry struct {
	meter   metric.Meter
	tracer  trace.Tracer
	metrics http.Handler
	// shutdown flushes and stops the providers, last created first.
	shutdown []func(context.Context) error

	// storageLatency is shared; each component's instruments are its
	// own, in its file.
	storageLatency metric.Float64Histogram
	engineInst     engineInstruments
	reaperInst     reaperInstruments
	retentionInst  retentionInstruments
	// backlog is where the backlog gauges read; nil until PollBacklog.
	backlog atomic.Pointer[BacklogPoller]
	// backlogInterval is Config.BacklogInterval.
	backlogInterval time.Duration
}

// New sets up the providers and exporters cfg asks for and creates the
// instruments. Call Shutdown when the relay stops, to flush what is
// buffered.
func New(ctx context.Context, cfg Config) (*Telemetry, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	t := &Telemetry{backlogInterval: cfg.BacklogInterval}

	// Exporters fail in the background (a collector that is down); their
	// errors land in the relay's log rather than the standard logger. The
	// handler is process-wide, as the relay runs one Telemetry.
	log := cfg.Logger
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("telemetry export failed", "error", err)
	}))

	res, err := newResource(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := t.setupMetrics(ctx, cfg, res); err != nil {
		return nil, errors.Join(err, t.Shutdown(ctx))
	}
	if err := t.setupTraces(ctx, cfg, res); err != nil {
		return nil, errors.Join(err, t.Shutdown(ctx))
	}
	if err := t.createInstruments(); err != nil {
		return nil, errors.Join(fmt.Errorf("create instruments: %w", err), t.Shutdown(ctx))
	}
	return t, nil
}

// BrokerAttribute is the resource attribute that names the broker
// (Config.Broker); Prometheus spells it outbox_broker.
const BrokerAttribute = "outbox.broker"

func newResource(ctx context.Context, cfg Config) (*resource.Resource, error) {
	attrs := []attribute.KeyValue{attribute.String("service.name", cfg.ServiceName)}
	if cfg.ServiceVersion != "" {
		attrs = append(attrs, attribute.String("service.version", cfg.ServiceVersion))
	}
	if cfg.InstanceID != "" {
		attrs = append(attrs, attribute.String("service.instance.id", cfg.InstanceID))
	}
	if cfg.Broker != "" {
		attrs = append(attrs, attribute.String(BrokerAttribute, cfg.Broker))
	}
	// Later options win: OTEL_RESOURCE_ATTRIBUTES may add attributes (a
	// Kubernetes pod name, say) but not rename the relay.
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
		resource.WithAttributes(attrs...))
	if errors.Is(err, resource.ErrPartialResource) {
		cfg.Logger.Warn("some OpenTelemetry resource attributes were left out", "error", err)
		err = nil
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry resource: %w", err)
	}
	return res, nil
}

func (t *Telemetry) setupMetrics(ctx context.Context, cfg Config, res *resource.Resource) error {
	names, _ := exporterList(cfg.MetricsExporter, ExporterPrometheus, ExporterOTLP)
	var readers []sdkmetric.Reader
	for _, name := range names {
		switch name {
		case ExporterPrometheus:
			// A registry of our own, not the global default, so that
			// nothing else in the process leaks onto /metrics and two
			// relays in one test binary do not collide.
			reg := prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			// The broker is one value per relay: as a label on every
			// series it costs no cardinality and spares dashboards a join
			// with target_info.
			exp, err := otelprom.New(otelprom.WithRegisterer(reg),
				otelprom.WithResourceAsConstantLabels(attribute.NewAllowKeysFilter(BrokerAttribute)))
			if err != nil {
				return fmt.Errorf("prometheus exporter: %w", err)
			}
			readers = append(readers, exp)
			t.metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
		case ExporterOTLP:
			var exp sdkmetric.Exporter
			var err error
			if cfg.OTLPMetricsProtocol == ProtocolGRPC {
				exp, err = otlpmetricgrpc.New(ctx)
			} else {
				exp, err = otlpmetrichttp.New(ctx)
			}
			if err != nil {
				return fmt.Errorf("OTLP metric exporter: %w", err)
			}
			readers = append(readers, sdkmetric.NewPeriodicReader(exp))
		}
	}
	if cfg.MetricReader != nil {
		readers = append(readers, cfg.MetricReader)
	}
	if len(readers) == 0 {
		t.meter = metricnoop.NewMeterProvider().Meter(scopeName)
		return nil
	}
	opts := []sdkmetric.Option{sdkmetric.WithResource(res)}
	for _, r := range readers {
		opts = append(opts, sdkmetric.WithReader(r))
	}
	mp := sdkmetric.NewMeterProvider(opts...)
	t.shutdown = append(t.shutdown, mp.Shutdown)
	t.meter = mp.Meter(scopeName)
	return nil
}

func (t *Telemetry) setupTraces(ctx context.Context, cfg Config, res *resource.Resource) error {
	names, _ := exporterList(cfg.TracesExporter, ExporterOTLP, ExporterConsole)
	var opts []sdktrace.TracerProviderOption
	for _, name := range names {
		var exp sdktrace.SpanExporter
		var err error
		switch name {
		case ExporterOTLP:
			if cfg.OTLPTracesProtocol == ProtocolGRPC {
				exp, err = otlptracegrpc.New(ctx)
			} else {
				exp, err = otlptracehttp.New(ctx)
			}
		case ExporterConsole:
			exp, err = stdouttrace.New(stdouttrace.WithWriter(cfg.Console))
		}
		if err != nil {
			return fmt.Errorf("%s span exporter: %w", name, err)
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	if cfg.SpanExporter != nil {
		opts = append(opts, sdktrace.WithSyncer(cfg.SpanExporter))
	}
	if len(opts) == 0 {
		// Spans that nobody exports are never recorded, so the publish
		// stage does not even look for traceparent headers.
		t.tracer = tracenoop.NewTracerProvider().Tracer(scopeName)
		return nil
	}
	tp := sdktrace.NewTracerProvider(append(opts, sdktrace.WithResource(res))...)
	t.shutdown = append(t.shutdown, tp.Shutdown)
	t.tracer = tp.Tracer(scopeName)
	return nil
}

// MetricsHandler serves the Prometheus exposition; nil unless the
// prometheus exporter is enabled.
func (t *Telemetry) MetricsHandler() http.Handler { return t.metrics }

// Shutdown exports what is buffered and stops the providers. Call it once,
// after the engine has stopped.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	for _, fn := range slices.Backward(t.shutdown) {
		if err := fn(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	t.shutdown = nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("telemetry shutdown: %w", err)
	}
	return nil
}
