package main

import (
	"net/url"
	"reflect"
	"slices"
	"sort"

	"github.com/outbox-relay/relay/internal/spelling"
	"github.com/outbox-relay/relay/pkg/storage/postgres"
)

// otherReaders are variables the relay reads through its libraries rather
// than its config struct: Go's runtime and the OpenTelemetry SDK (pgx's
// are postgres.EnvVariables). They are never taken for slips, and a slip of one is
// pointed at it.
var otherReaders = []string{
	"GOGC", "GOMEMLIMIT", "GOMAXPROCS", "GODEBUG", "GOTRACEBACK",
	"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_METRICS_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
	"OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
	"OTEL_EXPORTER_OTLP_CERTIFICATE", "OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE", "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
	"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "OTEL_EXPORTER_OTLP_CLIENT_KEY",
	"OTEL_EXPORTER_OTLP_COMPRESSION", "OTEL_EXPORTER_OTLP_METRICS_COMPRESSION", "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
	"OTEL_EXPORTER_OTLP_INSECURE", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
	"OTEL_METRIC_EXPORT_INTERVAL", "OTEL_METRIC_EXPORT_TIMEOUT", "OTEL_PROPAGATORS", "OTEL_SDK_DISABLED",
	"OTEL_BSP_SCHEDULE_DELAY", "OTEL_BSP_EXPORT_TIMEOUT", "OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
	"OTEL_SPAN_LINK_COUNT_LIMIT", "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_ATTRIBUTE_COUNT_LIMIT",
}

// knownVariables are every variable the relay reads: its settings, Open
// Outbox's names it translates or ignores with a note, and otherReaders.
func knownVariables() []string {
	var names []string
	for _, t := range []reflect.Type{reflect.TypeOf(config{}), reflect.TypeOf(openOutboxConfig{})} {
		for i := range t.NumField() {
			if name := t.Field(i).Tag.Get("env"); name != "" {
				names = append(names, name)
			}
		}
	}
	for _, s := range ignoredOpenOutboxSettings {
		names = append(names, s.name)
	}
	names = append(names, otherReaders...)
	names = append(names, postgres.EnvVariables...)
	sort.Strings(names)
	return names
}

// envSlipWarnings says, for each variable that looks like a misspelt
// setting (BACH_SIZE), which one it probably meant. Variables a PUBLISHER_URL
// names (secret_env) are the user's own and never slips.
func envSlipWarnings(environ map[string]string) []string {
	known := knownVariables()
	var kvs []string
	for k := range environ {
		kvs = append(kvs, k+"=")
	}
	var out []string
	for _, s := range spelling.EnvSlips(kvs, known) {
		if namedInURL(environ["PUBLISHER_URL"], s.Name) {
			continue
		}
		out = append(out, s.Name+" is set but is not a setting of the relay, and is ignored; did you mean "+s.Meant+"?")
	}
	return out
}

// namedInURL reports whether rawURL's query names the variable name, as a
// webhook's secret_env does.
func namedInURL(rawURL, name string) bool {
	u, err := url.Parse(rawURL)
	if err != nil {
		return false
	}
	for _, vs := range u.Query() {
		if slices.Contains(vs, name) {
			return true
		}
	}
	return false
}
