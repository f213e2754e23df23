package telemetry

import (
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// instrument is what an instrument was created with.
type instrument struct {
	kind, unit, help string
}

// recordingMeter creates real instruments and remembers each one's kind,
// unit and description, whether or not anything is ever recorded on it.
type recordingMeter struct {
	metric.Meter
	got map[string]instrument
}

func (m *recordingMeter) add(name, kind, unit, help string) {
	m.got[name] = instrument{kind: kind, unit: unit, help: help}
}

func (m *recordingMeter) Int64Counter(name string, o ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	c := metric.NewInt64CounterConfig(o...)
	m.add(name, "counter", c.Unit(), c.Description())
	return m.Meter.Int64Counter(name, o...)
}

func (m *recordingMeter) Int64Gauge(name string, o ...metric.Int64GaugeOption) (metric.Int64Gauge, error) {
	c := metric.NewInt64GaugeConfig(o...)
	m.add(name, "gauge", c.Unit(), c.Description())
	return m.Meter.Int64Gauge(name, o...)
}

func (m *recordingMeter) Int64ObservableGauge(name string, o ...metric.Int64ObservableGaugeOption) (metric.Int64ObservableGauge, error) {
	c := metric.NewInt64ObservableGaugeConfig(o...)
	m.add(name, "gauge", c.Unit(), c.Description())
	return m.Meter.Int64ObservableGauge(name, o...)
}

func (m *recordingMeter) Float64ObservableGauge(name string, o ...metric.Float64ObservableGaugeOption) (metric.Float64ObservableGauge, error) {
	c := metric.NewFloat64ObservableGaugeConfig(o...)
	m.add(name, "gauge", c.Unit(), c.Description())
	return m.Meter.Float64ObservableGauge(name, o...)
}

func (m *recordingMeter) Int64Histogram(name string, o ...metric.Int64HistogramOption) (metric.Int64Histogram, error) {
	c := metric.NewInt64HistogramConfig(o...)
	m.add(name, "histogram", c.Unit(), c.Description())
	return m.Meter.Int64Histogram(name, o...)
}

func (m *recordingMeter) Float64Histogram(name string, o ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	c := metric.NewFloat64HistogramConfig(o...)
	m.add(name, "histogram", c.Unit(), c.Description())
	return m.Meter.Float64Histogram(name, o...)
}

// registeredInstruments creates every instrument the relay can export,
// CAPTURE=wal's included, and returns them by name.
func registeredInstruments(t *testing.T) map[string]instrument {
	t.Helper()
	rec := &recordingMeter{Meter: sdkmetric.NewMeterProvider().Meter(scopeName), got: map[string]instrument{}}
	tel := &Telemetry{meter: rec}
	if err := tel.createInstruments(); err != nil {
		t.Fatal(err)
	}
	if _, err := tel.CaptureObserver(nil, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	return rec.got
}

// documented is one row of docs/metrics.md's table of instruments.
type documented struct {
	kind, unit, attributes, meaning string
}

// documentedInstruments parses the table of docs/metrics.md's Instruments
// section: | `name` | `prometheus_name` | type | unit | attributes | meaning |.
func documentedInstruments(t *testing.T) map[string]documented {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Instruments\n")
	if !ok {
		t.Fatal("docs/metrics.md has no Instruments section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	out := map[string]documented{}
	for line := range strings.Lines(section) {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		// \| inside a cell is a literal bar.
		cells := strings.Split(strings.ReplaceAll(strings.TrimSpace(line), `\|`, "\x00"), "|")
		if len(cells) != 8 {
			t.Fatalf("docs/metrics.md: a row of the instruments table has %d cells, want 6: %s", len(cells)-2, line)
		}
		cell := func(i int) string {
			s := strings.TrimSpace(strings.ReplaceAll(cells[i], "\x00", "|"))
			if s == "—" {
				return ""
			}
			return strings.Trim(s, "`")
		}
		name := cell(1)
		if _, dup := out[name]; dup {
			t.Errorf("docs/metrics.md documents %s twice", name)
		}
		out[name] = documented{kind: cell(3), unit: cell(4), attributes: cell(5), meaning: cell(6)}
	}
	if len(out) == 0 {
		t.Fatal("docs/metrics.md: no instrument rows found")
	}
	return out
}

// attributeValues reads an attributes cell, `status` = `a` | `b`; `op` = …,
// into its keys' values.
func attributeValues(cell string) map[string][]string {
	out := map[string][]string{}
	for part := range strings.SplitSeq(cell, ";") {
		key, vals, ok := strings.Cut(part, "=")
		if !ok {
			continue
		}
		key = strings.Trim(strings.TrimSpace(key), "`")
		for v := range strings.SplitSeq(vals, "|") {
			out[key] = append(out[key], strings.Trim(strings.TrimSpace(v), "`"))
		}
	}
	return out
}

// hasWord reports whether s holds w as a word of its own.
func hasWord(s, w string) bool {
	return regexp.MustCompile(`(^|[^A-Za-z0-9_])` + regexp.QuoteMeta(w) + `($|[^A-Za-z0-9_])`).MatchString(s)
}

// keyClaims are words the help and docs/metrics.md must both say about an
// instrument, where saying otherwise would mislead an alert: the oldest
// age counts only events that are due.
var keyClaims = map[string][]string{
	MetricOldestAge:    {"due", "PENDING", "created_at"},
	MetricPendingCount: {"PENDING", "new", "retrying"},
	MetricDeadCount:    {"DEAD"},
}

// TestHelpAgreesWithDocs holds /metrics' help (the instruments'
// descriptions) and docs/metrics.md's table to the same instruments, types,
// units and attribute values, so that neither can drift from the other.
func TestHelpAgreesWithDocs(t *testing.T) {
	t.Parallel()
	got := registeredInstruments(t)
	docs := documentedInstruments(t)
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range got {
			if !yield(n) {
				return
			}
		}
	}) {
		in := got[name]
		d, ok := docs[name]
		if !ok {
			t.Errorf("%s is exported but docs/metrics.md does not document it", name)
			continue
		}
		if d.kind != in.kind || d.unit != in.unit {
			t.Errorf("%s: docs/metrics.md says %s in %q, the code makes a %s in %q", name, d.kind, d.unit, in.kind, in.unit)
		}
		if in.help == "" {
			t.Errorf("%s has no help", name)
		}
		for key, vals := range attributeValues(d.attributes) {
			for _, v := range vals {
				if !hasWord(in.help, v) {
					t.Errorf("%s: docs/metrics.md gives %s = %s, which its help does not name: %q", name, key, v, in.help)
				}
			}
		}
		for _, w := range keyClaims[name] {
			if !hasWord(in.help, w) || !hasWord(d.meaning, w) {
				t.Errorf("%s: the help and docs/metrics.md must both say %q:\n help: %s\n docs: %s", name, w, in.help, d.meaning)
			}
		}
	}
	for name := range docs {
		if _, ok := got[name]; !ok {
			t.Errorf("docs/metrics.md documents %s, which the relay does not export", name)
		}
	}
	// The storage ops: the help's list is exactly the documented one.
	ops := attributeValues(docs[MetricStorageLatency].attributes)[attrOp]
	if !slices.Equal(slices.Sorted(slices.Values(ops)), slices.Sorted(slices.Values(storageOps))) {
		t.Errorf("docs/metrics.md lists the storage ops %v; the relay records %v", ops, storageOps)
	}
	help := got[MetricStorageLatency].help
	_, list, _ := strings.Cut(help, "by op (")
	list, _, _ = strings.Cut(list, ")")
	if helpOps := strings.Split(list, ", "); !slices.Equal(slices.Sorted(slices.Values(helpOps)), slices.Sorted(slices.Values(ops))) {
		t.Errorf("storage.latency's help lists the ops %v, docs/metrics.md %v", helpOps, ops)
	}
}

// TestStorageOpsAreRelays: every settle op the engine and the capture
// report (pkg/relay's Op constants) is in storageOps, so that the help and
// the docs cannot miss one added later.
func TestStorageOpsAreRelays(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	dir := filepath.Join("..", "..", "pkg", "relay")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if !regexp.MustCompile(`^Op[A-Z]`).MatchString(n.Name) || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Fatalf("relay.%s is not a string literal", n.Name)
					}
					v, _ := strconv.Unquote(lit.Value)
					found = append(found, v)
					if !slices.Contains(storageOps, v) {
						t.Errorf("relay.%s = %q is reported to StartSettle but is not in storageOps", n.Name, v)
					}
				}
			}
		}
	}
	if len(found) < 9 {
		t.Errorf("found only the relay ops %v: has pkg/relay moved?", found)
	}
}
