package telemetry

import (
	"context"
	"testing"
)

// A zero Config takes the defaults: Prometheus metrics, no traces, OTLP
// over HTTP, the backlog read every BacklogIntervalDefault.
func TestZeroConfigTakesTheDefaults(t *testing.T) {
	t.Parallel()
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("Validate of a zero Config: %v", err)
	}
	d := Config{}.withDefaults()
	if d.ServiceName != ServiceNameDefault || d.MetricsExporter != MetricsExporterDefault ||
		d.TracesExporter != TracesExporterDefault || d.OTLPMetricsProtocol != OTLPProtocolDefault ||
		d.OTLPTracesProtocol != OTLPProtocolDefault || d.BacklogInterval != BacklogIntervalDefault {
		t.Errorf("Config{} with defaults = %+v", d)
	}
	tel, err := New(context.Background(), Config{MetricsExporter: ExporterNone})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tel.Shutdown(context.Background()) }()
	if got := tel.PollBacklog(nil, nil).interval; got != BacklogIntervalDefault {
		t.Errorf("the backlog is read every %s, want %s", got, BacklogIntervalDefault)
	}
}
