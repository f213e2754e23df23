package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caarlos0/env/v11"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	pkgconfig "github.com/outbox-relay/relay/internal/fieldcheck"
	"github.com/outbox-relay/relay/internal/retention"
	"github.com/outbox-relay/relay/internal/telemetry"
	"github.com/outbox-relay/relay/pkg/capture/pgwal"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/reaper"
	"github.com/outbox-relay/relay/pkg/relay"
	"github.com/outbox-relay/relay/pkg/storage"
)

// config is everything the relay reads from the environment. Names follow
// Open Outbox Relay where it has the same setting. docs/configuration.md
// documents each one; a test keeps the two in step.
//
// A variable's sets tag names the package Config fields it sets
// (package.Field, as the package's FieldErrors name them), so that an error
// about a field names the variable instead (explainFieldErrors). Unset, a
// variable keeps the package's default, which defaultConfig holds; set to 0
// it is refused (explicitZeros) unless its zero tag says what 0 means there.
type config struct {
	StorageURL       string `env:"STORAGE_URL"`
	PublisherURL     string `env:"PUBLISHER_URL"`
	StorageTableName string `env:"STORAGE_TABLE_NAME"`
	AutoMigrate      bool   `env:"STORAGE_AUTO_MIGRATE"`
	RelayID          string `env:"RELAY_ID" sets:"relay.RelayID telemetry.InstanceID"`

	BatchSize          int           `env:"BATCH_SIZE" sets:"relay.BatchSize"`
	MaxBatchBytes      byteSize      `env:"MAX_BATCH_BYTES" sets:"relay.MaxBatchBytes"`
	PollInterval       time.Duration `env:"POLL_INTERVAL" sets:"relay.PollInterval"`
	SweepInterval      time.Duration `env:"SWEEP_INTERVAL" sets:"relay.SweepInterval"`
	MaxInFlightBatches int           `env:"MAX_IN_FLIGHT_BATCHES" sets:"relay.MaxInFlightBatches"`
	LeaseTimeout       time.Duration `env:"LEASE_TIMEOUT" sets:"relay.LeaseTimeout reaper.LeaseTimeout"`
	ReaperInterval     time.Duration `env:"REAPER_INTERVAL" sets:"reaper.Interval"`
	ReapBatchSize      int           `env:"REAP_BATCH_SIZE" sets:"reaper.BatchSize"`
	RetryMaxAttempts   int           `env:"RETRY_MAX_ATTEMPTS" sets:"relay.Retry.MaxAttempts reaper.MaxAttempts"`
	RetryBaseDelay     time.Duration `env:"RETRY_BASE_DELAY" sets:"relay.Retry.BaseDelay"`
	RetryMaxDelay      time.Duration `env:"RETRY_MAX_DELAY" sets:"relay.Retry.MaxDelay"`
	RetryJitter        float64       `env:"RETRY_JITTER" sets:"relay.Retry.Jitter" zero:"off"`
	ShutdownTimeout    time.Duration `env:"SHUTDOWN_TIMEOUT" sets:"relay.ShutdownTimeout"`

	DeliveredRetention keepFor       `env:"DELIVERED_RETENTION"`
	DeadRetention      keepFor       `env:"DEAD_RETENTION"`
	RetentionInterval  time.Duration `env:"RETENTION_INTERVAL" sets:"retention.Interval"`

	// CAPTURE=wal reads new events from PostgreSQL's write-ahead log.
	Capture              string        `env:"CAPTURE"`
	WALSlotName          string        `env:"WAL_SLOT_NAME" sets:"pgwal.Slot"`
	WALPublicationName   string        `env:"WAL_PUBLICATION_NAME" sets:"pgwal.Publication"`
	WALHeartbeatInterval time.Duration `env:"WAL_HEARTBEAT_INTERVAL" sets:"pgwal.Heartbeat" zero:"off"`
	WALStorageURL        string        `env:"WAL_STORAGE_URL"`
	// CAPTURE=binlog reads new events from MySQL's or MariaDB's binary log.
	BinlogServerID uint32 `env:"BINLOG_SERVER_ID" sets:"binlog.ServerID"`

	Wakeup         string        `env:"WAKEUP"`
	NotifyDebounce time.Duration `env:"NOTIFY_DEBOUNCE" sets:"relay.NotifyDebounce" zero:"off"`
	Ordering       string        `env:"ORDERING" sets:"relay.Ordering"`
	OrderingOnDead string        `env:"ORDERING_ON_DEAD" sets:"relay.OnDead"`
	LeaseMode      string        `env:"LEASE_MODE" sets:"relay.LeaseMode"`

	HTTPAddr  string `env:"HTTP_ADDR"`
	LogLevel  string `env:"LOG_LEVEL"`
	LogFormat string `env:"LOG_FORMAT"`

	// Telemetry. The OTEL_* names are the OpenTelemetry specification's;
	// the exporters read the rest of theirs (OTEL_EXPORTER_OTLP_ENDPOINT,
	// ...) from the process environment themselves.
	ServiceName         string        `env:"OTEL_SERVICE_NAME" sets:"telemetry.ServiceName"`
	MetricsExporter     string        `env:"OTEL_METRICS_EXPORTER" sets:"telemetry.MetricsExporter"`
	TracesExporter      string        `env:"OTEL_TRACES_EXPORTER" sets:"telemetry.TracesExporter"`
	OTLPProtocol        string        `env:"OTEL_EXPORTER_OTLP_PROTOCOL" sets:"telemetry.OTLPMetricsProtocol telemetry.OTLPTracesProtocol"`
	OTLPMetricsProtocol string        `env:"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL" sets:"telemetry.OTLPMetricsProtocol"`
	OTLPTracesProtocol  string        `env:"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL" sets:"telemetry.OTLPTracesProtocol"`
	BacklogInterval     time.Duration `env:"BACKLOG_INTERVAL" sets:"telemetry.BacklogInterval"`

	// notes say which Open Outbox settings were translated or ignored.
	notes []string

	// storageURLDefaulted is set when STORAGE_URL was not set: the start
	// says so, since a variable misspelt or left out of a deployment
	// otherwise sends the relay to a local database nobody meant.
	storageURLDefaulted bool

	// environ is the environment the config was read from. Drivers look
	// up in it only what their URL names (the webhook's secret_env).
	environ map[string]string

	// spanExporter, when set, also receives every span; tests set it to
	// an in-memory exporter. No environment variable sets it.
	spanExporter sdktrace.SpanExporter
}

// WAKEUP values. Unset means notify where the storage can notify (PostgreSQL)
// and poll where it cannot (MySQL).
const (
	wakeupNotify = "notify"
	wakeupPoll   = "poll"
)

// Defaults that belong to no package.
const httpAddrDefault = ":8080"

func defaultConfig() config {
	return config{
		StorageURL:           storage.URLDefault,
		BatchSize:            relay.BatchSizeDefault,
		MaxBatchBytes:        relay.MaxBatchBytesDefault,
		PollInterval:         relay.PollIntervalDefault,
		SweepInterval:        relay.SweepIntervalDefault,
		MaxInFlightBatches:   relay.MaxInFlightBatchesDefault,
		LeaseTimeout:         relay.LeaseTimeoutDefault,
		ReaperInterval:       reaper.IntervalDefault,
		ReapBatchSize:        reaper.BatchSizeDefault,
		RetryMaxAttempts:     relay.RetryMaxAttemptsDefault,
		RetryBaseDelay:       relay.RetryBaseDelayDefault,
		RetryMaxDelay:        relay.RetryMaxDelayDefault,
		RetryJitter:          relay.RetryJitterDefault,
		ShutdownTimeout:      relay.ShutdownTimeoutDefault,
		DeliveredRetention:   forever,
		DeadRetention:        forever,
		RetentionInterval:    retention.IntervalDefault,
		NotifyDebounce:       relay.NotifyDebounceDefault,
		Capture:              capturePoll,
		WALHeartbeatInterval: pgwal.HeartbeatDefault,
		Ordering:             string(relay.OrderingDefault),
		OrderingOnDead:       string(relay.OnDeadDefault),
		LeaseMode:            string(relay.LeaseModeDefault),
		HTTPAddr:             httpAddrDefault,
		LogLevel:             "info",
		LogFormat:            "json",
		ServiceName:          telemetry.ServiceNameDefault,
		MetricsExporter:      telemetry.MetricsExporterDefault,
		TracesExporter:       telemetry.TracesExporterDefault,
		OTLPProtocol:         telemetry.OTLPProtocolDefault,
		BacklogInterval:      telemetry.BacklogIntervalDefault,
	}
}

// usageError is a configuration mistake: the relay exits 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// loadConfig reads the environment over the defaults and validates the
// result. Every error names the variable to fix.
func loadConfig(environ map[string]string) (config, error) {
	cfg := defaultConfig()
	if err := env.ParseWithOptions(&cfg, env.Options{Environment: environ}); err != nil {
		return cfg, usageError{explainEnvError(err)}
	}
	notes, err := applyOpenOutbox(&cfg, environ)
	if err != nil {
		return cfg, usageError{err}
	}
	cfg.notes = notes
	cfg.environ = environ
	cfg.storageURLDefaulted = environ["STORAGE_URL"] == ""
	if cfg.RelayID == "" {
		cfg.RelayID = defaultRelayID()
	}
	return cfg, cfg.validate()
}

// explainEnvError rewrites the env library's errors, which name Go fields,
// to name the environment variable instead.
func explainEnvError(err error) error {
	var agg env.AggregateError
	if !errors.As(err, &agg) {
		return err
	}
	t := reflect.TypeOf(config{})
	var out []error
	for _, e := range agg.Errors {
		var pe env.ParseError
		if errors.As(e, &pe) {
			if f, ok := t.FieldByName(pe.Name); ok {
				out = append(out, fmt.Errorf("%s: cannot parse as %s: %w", f.Tag.Get("env"), kindName(pe.Type), pe.Err))
				continue
			}
		}
		out = append(out, e)
	}
	return errors.Join(out...)
}

// fieldVariables maps "package.Field", as a package's FieldError names a
// Config field, to the variables whose sets tag names it. A field that
// several variables set is named by the most specific, the others in
// parentheses: OTEL_EXPORTER_OTLP_METRICS_PROTOCOL (or
// OTEL_EXPORTER_OTLP_PROTOCOL).
var fieldVariables = sync.OnceValue(func() map[string]string {
	type setter struct {
		name   string
		fields int
	}
	setters := map[string][]setter{}
	t := reflect.TypeOf(config{})
	for i := range t.NumField() {
		f := t.Field(i)
		fields := strings.Fields(f.Tag.Get("sets"))
		for _, field := range fields {
			setters[field] = append(setters[field], setter{f.Tag.Get("env"), len(fields)})
		}
	}
	names := map[string]string{}
	for field, s := range setters {
		slices.SortStableFunc(s, func(a, b setter) int { return a.fields - b.fields })
		name := s[0].name
		for i, o := range s[1:] {
			if i == 0 {
				name += " (or "
			} else {
				name += " or "
			}
			name += o.name
		}
		if len(s) > 1 {
			name += ")"
		}
		names[field] = name
	}
	return names
})

// fieldVariable is the variable that sets a package's Config field, or "".
func fieldVariable(pkg, field string) string { return fieldVariables()[pkg+"."+field] }

// explainFieldErrors rewrites the packages' FieldErrors in err, which name
// Go fields, to name the variables that set them, each message once.
func explainFieldErrors(err error) error { return pkgconfig.Rename(err, fieldVariable) }

// explicitZeros refuses the variables set to 0 whose fields take their
// default at zero: unset is how to ask for the default, and a 0 written on
// purpose (BATCH_SIZE=0) would otherwise be quietly replaced. defaultConfig
// fills every such field, so a zero here was set. A zero tag says what 0
// means instead (off, for RETRY_JITTER), and the config's XxxConfig
// methods translate it.
func (c config) explicitZeros() error {
	var errs []error
	v, t := reflect.ValueOf(c), reflect.TypeOf(c)
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Tag.Get("sets") == "" || f.Tag.Get("zero") != "" {
			continue
		}
		switch f.Type.Kind() {
		case reflect.Int, reflect.Int64, reflect.Float64:
			if v.Field(i).IsZero() {
				errs = append(errs, fmt.Errorf("%s must be positive, got %v", f.Tag.Get("env"), v.Field(i).Interface()))
			}
		}
	}
	return errors.Join(errs...)
}

// offWhenZero is v, or off when v is 0: a variable whose 0 turns
// something off, where the package's zero is its default.
func offWhenZero[T comparable](v, off T) T {
	var zero T
	if v == zero {
		return off
	}
	return v
}

func kindName(t reflect.Type) string {
	switch t {
	case reflect.TypeOf(time.Duration(0)):
		return "a duration (such as 500ms, 30s or 5m)"
	case reflect.TypeOf(0):
		return "an integer"
	case reflect.TypeOf(false):
		return "a boolean (true or false)"
	case reflect.TypeOf(0.0):
		return "a number"
	case reflect.TypeOf(keepFor(0)):
		return "a retention (such as 7d, 36h, 2w or 0)"
	case reflect.TypeOf(byteSize(0)):
		return "a size (such as 8MiB, 512KiB or 1048576)"
	}
	return t.String()
}

func (c config) validate() error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if d, err := storage.Lookup(c.StorageURL); err != nil {
		add(fmt.Errorf("STORAGE_URL: %w", err))
	} else if c.StorageTableName != "" {
		if err := d.CheckTable(c.StorageTableName); err != nil {
			add(fmt.Errorf("STORAGE_TABLE_NAME: %w", err))
		}
	}
	switch c.PublisherURL {
	case "":
		// Printing events to stdout and marking them delivered is no
		// default: a typo in the variable's name would lose them all.
		add(errors.New("PUBLISHER_URL is not set: name the broker, such as nats://nats:4222, kafka://kafka:9092 or amqp://rabbitmq:5672/ (stdout:// prints events, and only when asked for)"))
	default:
		if err := publisher.Check(c.PublisherURL); err != nil {
			add(fmt.Errorf("PUBLISHER_URL: %w", err))
		}
	}
	add(c.explicitZeros())
	// 0 turns these off, which the engine spells as a negative value: that
	// value given is a mistake like any other negative one (which the
	// engine refuses), not another way to say off.
	if c.RetryJitter == relay.NoJitter {
		add(fmt.Errorf("RETRY_JITTER must be between 0 and 1, got %g", c.RetryJitter))
	}
	if c.NotifyDebounce == relay.NoDebounce {
		add(fmt.Errorf("NOTIFY_DEBOUNCE must not be negative, got %s", c.NotifyDebounce))
	}
	add(c.engineConfig(nil).Validate())
	add(c.reaperConfig(nil).Validate())
	add(c.validateRetention())
	add(c.retentionConfig(nil).Validate())
	if _, err := parseLevel(c.LogLevel); err != nil {
		add(err)
	}
	add(c.validateCapture())
	if c.Wakeup != "" && c.Wakeup != wakeupNotify && c.Wakeup != wakeupPoll {
		add(fmt.Errorf("WAKEUP must be notify or poll, got %q", c.Wakeup))
	}
	if c.LogFormat != "json" && c.LogFormat != "text" {
		add(fmt.Errorf("LOG_FORMAT must be json or text, got %q", c.LogFormat))
	}
	add(c.validateHTTPAddr())
	add(c.telemetryConfig(nil).Validate())
	if err := explainFieldErrors(errors.Join(errs...)); err != nil {
		return usageError{err}
	}
	return nil
}

// validateHTTPAddr checks HTTP_ADDR now: net.Listen would fail only after
// the database and the broker were reached, and a bare "8080" is an easy
// mistake to make.
// Capture modes.
const (
	capturePoll   = "poll"
	captureWAL    = "wal"
	captureBinlog = "binlog"
)

func (c config) validateCapture() error {
	switch c.Capture {
	case capturePoll:
		return nil
	case captureWAL:
	case captureBinlog:
		if d, err := storage.Lookup(c.StorageURL); err == nil && d.Name != "MySQL" {
			return fmt.Errorf("CAPTURE=binlog reads the binary log of MySQL or MariaDB; STORAGE_URL is %s: use CAPTURE=wal or CAPTURE=poll", d.Name)
		}
		return nil
	default:
		return fmt.Errorf("CAPTURE must be poll, wal or binlog, got %q", c.Capture)
	}
	var errs []error
	if d, err := storage.Lookup(c.StorageURL); err == nil && d.Name != "PostgreSQL" {
		errs = append(errs, fmt.Errorf("CAPTURE=wal reads PostgreSQL's write-ahead log; STORAGE_URL is %s: use CAPTURE=poll", d.Name))
	}
	errs = append(errs, c.walConfig(nil).Validate())
	if c.WALHeartbeatInterval < 0 {
		// pgwal's negative is off, which the variable spells 0.
		errs = append(errs, fmt.Errorf("WAL_HEARTBEAT_INTERVAL must not be negative, got %s (0 turns heartbeats off)", c.WALHeartbeatInterval))
	}
	return errors.Join(errs...)
}

// walConfig is what CAPTURE=wal reads with; the storage adds the table and
// its connection, and empty names are the table's defaults.
func (c config) walConfig(log *slog.Logger) pgwal.Config {
	cfg := pgwal.Config{
		Slot:        c.WALSlotName,
		Publication: c.WALPublicationName,
		Heartbeat:   offWhenZero(c.WALHeartbeatInterval, pgwal.HeartbeatOff),
		Logger:      log,
	}
	if c.WALStorageURL != "" {
		// Its table parameter, if any, is the relay's: pgwal drops it.
		cfg.ConnString = c.WALStorageURL
	}
	return cfg
}

func (c config) validateHTTPAddr() error {
	if c.HTTPAddr == "" {
		return errors.New("HTTP_ADDR must not be empty (use 127.0.0.1:8080 to listen locally only)")
	}
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		return fmt.Errorf("HTTP_ADDR %q is not host:port (%v); use :%s to listen on every interface or 127.0.0.1:%s locally only",
			c.HTTPAddr, err, portHint(c.HTTPAddr), portHint(c.HTTPAddr))
	}
	return nil
}

// portHint is the port to suggest for a mistaken HTTP_ADDR: addr itself when
// it is one, else the default's.
func portHint(addr string) string {
	if _, err := strconv.Atoi(addr); err == nil {
		return addr
	}
	return strings.TrimPrefix(httpAddrDefault, ":")
}

func (c config) engineConfig(log *slog.Logger) relay.Config {
	return relay.Config{
		RelayID:            c.RelayID,
		BatchSize:          c.BatchSize,
		MaxBatchBytes:      int64(c.MaxBatchBytes),
		PollInterval:       c.PollInterval,
		SweepInterval:      c.SweepInterval,
		MaxInFlightBatches: c.MaxInFlightBatches,
		LeaseTimeout:       c.LeaseTimeout,
		// The end of SHUTDOWN_TIMEOUT is for closing what the engine used.
		ShutdownTimeout: c.ShutdownTimeout - closeReserve(c.ShutdownTimeout),
		Retry: relay.RetryPolicy{
			MaxAttempts: c.RetryMaxAttempts,
			BaseDelay:   c.RetryBaseDelay,
			MaxDelay:    c.RetryMaxDelay,
			Jitter:      offWhenZero(c.RetryJitter, relay.NoJitter),
		},
		Ordering:       storage.Ordering(c.Ordering),
		OnDead:         storage.DeadPolicy(c.OrderingOnDead),
		LeaseMode:      relay.LeaseMode(c.LeaseMode),
		NotifyDebounce: offWhenZero(c.NotifyDebounce, relay.NoDebounce),
		// DELIVERED_RETENTION=0: delete on delivery.
		DeleteDelivered: c.DeliveredRetention == 0,
		Broker:          publisher.Redact(c.PublisherURL),
		Logger:          log,
	}
}

func (c config) reaperConfig(log *slog.Logger) reaper.Config {
	return reaper.Config{
		Interval:     c.ReaperInterval,
		LeaseTimeout: c.LeaseTimeout,
		BatchSize:    c.ReapBatchSize,
		MaxAttempts:  c.RetryMaxAttempts,
		Logger:       log,
	}
}

// telemetryConfig is what the relay exports where. A signal's own OTLP
// protocol variable wins over OTEL_EXPORTER_OTLP_PROTOCOL, as the
// specification says.
func (c config) telemetryConfig(log *slog.Logger) telemetry.Config {
	or := func(specific, general string) string {
		if specific != "" {
			return specific
		}
		return general
	}
	return telemetry.Config{
		ServiceName:         c.ServiceName,
		ServiceVersion:      version,
		InstanceID:          c.RelayID,
		Broker:              brokerName(c.PublisherURL),
		MetricsExporter:     c.MetricsExporter,
		TracesExporter:      c.TracesExporter,
		OTLPMetricsProtocol: or(c.OTLPMetricsProtocol, c.OTLPProtocol),
		OTLPTracesProtocol:  or(c.OTLPTracesProtocol, c.OTLPProtocol),
		BacklogInterval:     c.BacklogInterval,
		Logger:              log,
		SpanExporter:        c.spanExporter,
	}
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return l, fmt.Errorf("LOG_LEVEL must be debug, info, warn or error, got %q", s)
	}
	return l, nil
}

// defaultRelayID is the host name plus a random suffix, so that two relays
// on one host, or a restarted pod, never share a lease identity.
func defaultRelayID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "relay"
	}
	return strings.ToLower(host) + "-" + randomSuffix()
}

// brokerName is the kind of broker a publisher URL names, for the
// outbox_broker label: the scheme, with the spellings of one broker made
// one (tls:// is NATS, amqp:// RabbitMQ, http(s):// a webhook). It is ""
// for a URL without a scheme, which the relay refuses anyway.
func brokerName(rawURL string) string {
	scheme, _, ok := strings.Cut(rawURL, "://")
	if !ok {
		return ""
	}
	switch scheme = strings.ToLower(scheme); scheme {
	case "tls":
		return "nats"
	case "amqp", "amqps":
		return "rabbitmq"
	case "rediss":
		return "redis"
	case "http", "https":
		return "webhook"
	}
	return scheme
}
