package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	t.Parallel()
	good := map[string]time.Duration{
		"0":        0,
		"0s":       0,
		"90s":      90 * time.Second,
		"36h":      36 * time.Hour,
		"1h30m":    90 * time.Minute,
		"500ms":    500 * time.Millisecond,
		"7d":       7 * 24 * time.Hour,
		"2w":       14 * 24 * time.Hour,
		"1.5d":     36 * time.Hour,
		"1w3d12h":  (7+3)*24*time.Hour + 12*time.Hour,
		"1d30m":    24*time.Hour + 30*time.Minute,
		"2h1d":     26 * time.Hour,
		"10us":     10 * time.Microsecond,
		"1000000h": 1000000 * time.Hour,
	}
	for in, want := range good {
		got, err := parseDuration(in)
		if err != nil || got != want {
			t.Errorf("parseDuration(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	bad := map[string]string{
		"":             "empty",
		"7":            "missing unit",
		"d":            "expected a number",
		"-7d":          "expected a number",
		"+1h":          "expected a number",
		"7x":           `unknown unit "x"`,
		"7days":        `unknown unit "days"`,
		"1.2.3h":       "bad number",
		"7d ":          `unknown unit "d "`,
		"100000000w":   "too long",
		"3000000h":     "too long",
		"15000w15000w": "too long",
	}
	for in, want := range bad {
		got, err := parseDuration(in)
		if err == nil {
			t.Errorf("parseDuration(%q) = %s, want an error", in, got)
			continue
		}
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "7d, 2w") {
			t.Errorf("parseDuration(%q) error %q does not say %q and show the syntax", in, err, want)
		}
	}
}

func TestParseSince(t *testing.T) {
	t.Parallel()
	now := time.Date(2024, 5, 10, 12, 0, 0, 0, time.UTC)
	cases := map[string]time.Time{
		"36h":                       now.Add(-36 * time.Hour),
		"7d":                        now.Add(-7 * 24 * time.Hour),
		"2024-05-01T08:30:00Z":      time.Date(2024, 5, 1, 8, 30, 0, 0, time.UTC),
		"2024-05-01T08:30:00+02:00": time.Date(2024, 5, 1, 6, 30, 0, 0, time.UTC),
	}
	for in, want := range cases {
		got, err := parseSince(in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("parseSince(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"yesterday", "2024-05-01", "-1h"} {
		if _, err := parseSince(in, now); err == nil {
			t.Errorf("parseSince(%q) succeeded", in)
		}
	}
}

func TestFormatAge(t *testing.T) {
	t.Parallel()
	cases := map[time.Duration]string{
		-time.Second:                    "0s",
		0:                               "0s",
		45 * time.Second:                "45s",
		3*time.Minute + 12*time.Second:  "3m12s",
		2*time.Hour + 5*time.Minute:     "2h05m",
		3*24*time.Hour + 4*time.Hour:    "3d04h",
		400*24*time.Hour + 23*time.Hour: "400d23h",
	}
	for in, want := range cases {
		if got := formatAge(in); got != want {
			t.Errorf("formatAge(%s) = %q, want %q", in, got, want)
		}
	}
}

func TestPayloadText(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in             []byte
		text, encoding string
	}{
		{[]byte(`{"a": "ü"}`), `{"a": "ü"}`, "text"},
		{[]byte("line 1\nline 2\ttab\r\n"), "line 1\nline 2\ttab\r\n", "text"},
		{[]byte{}, "", "text"},
		{[]byte{0xff, 0xfe, 0x00}, "//4A", "base64"},
		{[]byte("\x1b[2Jclear screen"), "G1sySmNsZWFyIHNjcmVlbg==", "base64"},
		{[]byte("nul\x00inside"), "bnVsAGluc2lkZQ==", "base64"},
	}
	for _, c := range cases {
		text, enc := payloadText(c.in)
		if text != c.text || enc != c.encoding {
			t.Errorf("payloadText(%q) = %q, %s; want %q, %s", c.in, text, enc, c.text, c.encoding)
		}
	}
}
