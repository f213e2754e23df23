package outbox_test

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/outbox-relay/relay/pkg/outbox"
)

func TestParseHeaders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		raw  string
		want map[string]string
	}{
		{"strings", `{"a":"x","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`,
			map[string]string{"a": "x", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}},
		{"escaped string", `{"a":"line\nbreak \"quoted\" \u00e9"}`, map[string]string{"a": "line\nbreak \"quoted\" é"}},
		{"empty string kept", `{"a":""}`, map[string]string{"a": ""}},
		{"numbers keep their JSON text", `{"int":42,"neg":-7,"dec":1.50,"exp":1e3,"zero":0,"big":12345678901234567890}`,
			map[string]string{"int": "42", "neg": "-7", "dec": "1.50", "exp": "1e3", "zero": "0", "big": "12345678901234567890"}},
		{"booleans", `{"t":true,"f":false}`, map[string]string{"t": "true", "f": "false"}},
		{"null values omitted", `{"a":null,"b":"x"}`, map[string]string{"b": "x"}},
		{"only nulls", `{"a":null}`, map[string]string{}},
		{"whitespace", " \n{ \"a\" : 1 , \"b\" : true }\t", map[string]string{"a": "1", "b": "true"}},
		{"unicode key", `{"clé":"v"}`, map[string]string{"clé": "v"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := outbox.ParseHeaders([]byte(tt.raw))
			if err != nil {
				t.Fatalf("ParseHeaders(%s) = %v", tt.raw, err)
			}
			if !maps.Equal(got, tt.want) {
				t.Errorf("ParseHeaders(%s) = %q, want %q", tt.raw, got, tt.want)
			}
		})
	}
}

func TestParseHeadersNone(t *testing.T) {
	t.Parallel()
	for _, raw := range [][]byte{nil, {}, []byte("null"), []byte("  null "), []byte("{}"), []byte(" { } "), []byte("   ")} {
		got, err := outbox.ParseHeaders(raw)
		if err != nil {
			t.Errorf("ParseHeaders(%q) = %v, want no error", raw, err)
		}
		if len(got) != 0 {
			t.Errorf("ParseHeaders(%q) = %q, want no headers", raw, got)
		}
	}
}

func TestParseHeadersRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		raw  string
		// every string must appear in the error
		want []string
	}{
		{"array value", `{"ok":"x","tags":["a","b"]}`, []string{`header "tags"`, "an array"}},
		{"object value", `{"meta":{"k":"v"}}`, []string{`header "meta"`, "an object"}},
		{"empty array value", `{"e":[]}`, []string{`header "e"`, "an array"}},
		{"top-level array", `["a","b"]`, []string{"must be a JSON object", "an array"}},
		{"top-level string", `"a"`, []string{"must be a JSON object", "a string"}},
		{"top-level number", `42`, []string{"must be a JSON object", "a number"}},
		{"top-level negative number", `-1`, []string{"must be a JSON object", "a number"}},
		{"top-level boolean", `true`, []string{"must be a JSON object", "a boolean"}},
		{"invalid JSON", `{"a":`, []string{"not valid JSON"}},
		{"invalid literal", `{"a":tru}`, []string{"not valid JSON"}},
		{"trailing garbage", `{"a":1} x`, []string{"not valid JSON"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := outbox.ParseHeaders([]byte(tt.raw))
			if err == nil {
				t.Fatalf("ParseHeaders(%s) = %q, want an error", tt.raw, got)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("ParseHeaders(%s) error %q does not mention %q", tt.raw, err, w)
				}
			}
			if got != nil {
				t.Errorf("ParseHeaders(%s) returned headers %q with its error", tt.raw, got)
			}
		})
	}
}

func TestStatus(t *testing.T) {
	t.Parallel()
	for _, s := range outbox.Statuses {
		if !s.Valid() {
			t.Errorf("%s.Valid() = false", s)
		}
	}
	if want := []outbox.Status{"PENDING", "DELIVERING", "DELIVERED", "DEAD"}; !slices.Equal(outbox.Statuses, want) {
		t.Errorf("Statuses = %v, want %v (the values stored in the status column)", outbox.Statuses, want)
	}
	for _, s := range []outbox.Status{"", "pending", "FAILED", "DELIVERED "} {
		if s.Valid() {
			t.Errorf("%q.Valid() = true", s)
		}
	}
}
