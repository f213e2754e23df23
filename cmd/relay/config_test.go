package main

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/retention"
	"github.com/outbox-relay/relay/internal/telemetry"
	"github.com/outbox-relay/relay/pkg/capture/binlog"
	"github.com/outbox-relay/relay/pkg/capture/pgwal"
	"github.com/outbox-relay/relay/pkg/reaper"
	"github.com/outbox-relay/relay/pkg/relay"
)

func TestBrokerName(t *testing.T) {
	t.Parallel()
	for url, want := range map[string]string{
		"nats://n:4222":              "nats",
		"tls://n:4222":               "nats",
		"kafka://b:9092":             "kafka",
		"amqp://guest:guest@r:5672/": "rabbitmq",
		"AMQPS://r":                  "rabbitmq",
		"redis://r:6379/0":           "redis",
		"rediss://r":                 "redis",
		"http://hooks.example/in":    "webhook",
		"https://hooks.example/in":   "webhook",
		"stdout://":                  "stdout",
		"null://":                    "null",
		"b1:9092,b2:9092":            "",
		"":                           "",
	} {
		if got := brokerName(url); got != want {
			t.Errorf("brokerName(%q) = %q, want %q", url, got, want)
		}
	}
}

// TestShutdownBudgetAsDocumented: docs/architecture.md gives the engine
// SHUTDOWN_TIMEOUT less a fifth (at most 2 s) for closing; these are its
// examples.
func TestShutdownBudgetAsDocumented(t *testing.T) {
	t.Parallel()
	for set, engine := range map[string]time.Duration{
		"30s": 28 * time.Second,
		"2s":  1600 * time.Millisecond,
		"5m":  298 * time.Second,
	} {
		cfg, err := loadConfig(map[string]string{"PUBLISHER_URL": "null://", "SHUTDOWN_TIMEOUT": set})
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.engineConfig(nil).ShutdownTimeout; got != engine {
			t.Errorf("SHUTDOWN_TIMEOUT=%s: the engine gets %s, want %s", set, got, engine)
		}
	}
}

// The packages name their Config fields in errors; the relay names the
// variable that set each, with the packages' wording, and says each thing
// once.
func TestFieldErrorsNameTheVariable(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"BATCH_SIZE": "-5"}, "BATCH_SIZE must be positive, got -5"},
		{map[string]string{"BATCH_SIZE": "0"}, "BATCH_SIZE must be positive, got 0"},
		{map[string]string{"POLL_INTERVAL": "0s"}, "POLL_INTERVAL must be positive, got 0s"},
		{map[string]string{"MAX_BATCH_BYTES": "0"}, "MAX_BATCH_BYTES must be positive, got 0"},
		// The engine and the reaper share these two: one line each.
		{map[string]string{"LEASE_TIMEOUT": "100ms"}, "LEASE_TIMEOUT must be at least 500ms, got 100ms"},
		{map[string]string{"LEASE_TIMEOUT": "-1s"}, "LEASE_TIMEOUT must be at least 500ms, got -1s"},
		{map[string]string{"RETRY_MAX_ATTEMPTS": "-2"}, "RETRY_MAX_ATTEMPTS must be positive, got -2"},
		{map[string]string{"REAPER_INTERVAL": "-1s", "REAP_BATCH_SIZE": "0"},
			"REAP_BATCH_SIZE must be positive, got 0\nREAPER_INTERVAL must be positive, got -1s"},
		{map[string]string{"BACKLOG_INTERVAL": "-1s"}, "BACKLOG_INTERVAL must be positive, got -1s"},
		{map[string]string{"OTEL_METRICS_EXPORTER": "statsd"}, `OTEL_METRICS_EXPORTER: unknown exporter "statsd"; use prometheus, otlp or none`},
		// A field two variables set is named by both, the specific first.
		{map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "grpc"},
			`OTEL_EXPORTER_OTLP_TRACES_PROTOCOL (or OTEL_EXPORTER_OTLP_PROTOCOL) must be grpc or http/protobuf (http/json is not supported), got "http/json"`},
		{map[string]string{"CAPTURE": "wal", "WAL_SLOT_NAME": "Bad-Name", "WAL_PUBLICATION_NAME": "1st"},
			`WAL_SLOT_NAME "Bad-Name": use lowercase letters, digits and underscores (at most 63)` + "\n" +
				`WAL_PUBLICATION_NAME "1st": use lowercase letters, digits and underscores (at most 63)`},
		{map[string]string{"CAPTURE": "wal", "WAL_HEARTBEAT_INTERVAL": "-1s"},
			"WAL_HEARTBEAT_INTERVAL must not be negative, got -1s (0 turns heartbeats off)"},
		{map[string]string{"RETENTION_INTERVAL": "-1s"}, "RETENTION_INTERVAL must be positive, got -1s"},
		{map[string]string{"RETRY_MAX_DELAY": "1ms"}, "RETRY_MAX_DELAY (1ms) must not be below RETRY_BASE_DELAY (1s)"},
		{map[string]string{"RETRY_JITTER": "-0.5"}, "RETRY_JITTER must be between 0 and 1, got -0.5"},
		{map[string]string{"RETRY_JITTER": "-1"}, "RETRY_JITTER must be between 0 and 1, got -1"},
		{map[string]string{"NOTIFY_DEBOUNCE": "-1ns"}, "NOTIFY_DEBOUNCE must not be negative, got -1ns"},
		{map[string]string{"LEASE_MODE": "row"}, `LEASE_MODE must be auto, lock or status, got "row"`},
		{map[string]string{"LEASE_MODE": "lock", "ORDERING": "partition"},
			"LEASE_MODE lock needs ORDERING none: an ordered claim must see which keys are at the broker, which only DELIVERING rows show (use auto or status)"},
		{map[string]string{"ORDERING_ON_DEAD": "wait"}, `ORDERING_ON_DEAD must be skip or block, got "wait"`},
		{map[string]string{"NOTIFY_DEBOUNCE": "-1ms"}, "NOTIFY_DEBOUNCE must not be negative, got -1ms"},
		{map[string]string{"BATCH_SIZE": "0", "ORDERING": "total"},
			"BATCH_SIZE must be positive, got 0\n" + `ORDERING must be none or partition, got "total"`},
	} {
		env := map[string]string{"PUBLISHER_URL": "null://"}
		for k, v := range c.env {
			env[k] = v
		}
		_, err := loadConfig(env)
		if err == nil || err.Error() != c.want {
			t.Errorf("%v: error\n%v\nwant\n%s", c.env, err, c.want)
		}
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("%v: %v is not a usage error (exit 2)", c.env, err)
		}
	}
}

// 0 turns jitter and the notification debounce off, as it always did;
// the engine's zero would be their defaults.
func TestZeroTurnsJitterAndDebounceOff(t *testing.T) {
	t.Parallel()
	cfg, err := loadConfig(map[string]string{"PUBLISHER_URL": "null://", "RETRY_JITTER": "0", "NOTIFY_DEBOUNCE": "0s"})
	if err != nil {
		t.Fatal(err)
	}
	ec := cfg.engineConfig(nil)
	if ec.Retry.Jitter != relay.NoJitter || ec.NotifyDebounce != relay.NoDebounce {
		t.Errorf("RETRY_JITTER=0 NOTIFY_DEBOUNCE=0s gave the engine jitter %g and debounce %s, want NoJitter and NoDebounce",
			ec.Retry.Jitter, ec.NotifyDebounce)
	}
	cfg, err = loadConfig(map[string]string{"PUBLISHER_URL": "null://"})
	if err != nil {
		t.Fatal(err)
	}
	if ec := cfg.engineConfig(nil); ec.Retry.Jitter != relay.RetryJitterDefault || ec.NotifyDebounce != relay.NotifyDebounceDefault {
		t.Errorf("unset: jitter %g and debounce %s, want the defaults", ec.Retry.Jitter, ec.NotifyDebounce)
	}
}

// explicitZeros tells a 0 that was set from an unset variable by the
// value alone: every field it judges must have a default that is not 0.
func TestZeroRefusedVariablesHaveDefaults(t *testing.T) {
	t.Parallel()
	v, typ := reflect.ValueOf(defaultConfig()), reflect.TypeOf(config{})
	for i := range typ.NumField() {
		f := typ.Field(i)
		if f.Tag.Get("sets") == "" || f.Tag.Get("zero") != "" {
			continue
		}
		switch f.Type.Kind() {
		case reflect.Int, reflect.Int64, reflect.Float64:
			if v.Field(i).IsZero() {
				t.Errorf("%s has no default, so unset it would be refused as 0", f.Tag.Get("env"))
			}
		}
	}
}

// Every sets tag names a field that exists in that package's Config, so
// that the errors about it name the variable.
func TestSetsTagsNameRealFields(t *testing.T) {
	t.Parallel()
	configs := map[string]reflect.Type{
		"relay":     reflect.TypeOf(relay.Config{}),
		"reaper":    reflect.TypeOf(reaper.Config{}),
		"retention": reflect.TypeOf(retention.Config{}),
		"telemetry": reflect.TypeOf(telemetry.Config{}),
		"pgwal":     reflect.TypeOf(pgwal.Config{}),
		"binlog":    reflect.TypeOf(binlog.Config{}),
	}
	typ := reflect.TypeOf(config{})
	for i := range typ.NumField() {
		for _, set := range strings.Fields(typ.Field(i).Tag.Get("sets")) {
			pkg, path, _ := strings.Cut(set, ".")
			t2, ok := configs[pkg]
			if !ok {
				t.Errorf("%s sets %s: no Config of package %s is known here", typ.Field(i).Tag.Get("env"), set, pkg)
				continue
			}
			for _, name := range strings.Split(path, ".") {
				f, ok := t2.FieldByName(name)
				if !ok {
					t.Errorf("%s sets %s: %s.Config has no such field", typ.Field(i).Tag.Get("env"), set, pkg)
					break
				}
				t2 = f.Type
			}
		}
	}
	if got := fieldVariable("relay", "Retry.MaxAttempts"); got != "RETRY_MAX_ATTEMPTS" {
		t.Errorf("relay.Retry.MaxAttempts is set by %q, want RETRY_MAX_ATTEMPTS", got)
	}
}
