// Package logfmt holds what the binaries' loggers share in how they write
// values, so that the relay's log and relay-cli's read alike.
package logfmt

import "log/slog"

// ReplaceAttr is the binaries' slog.HandlerOptions.ReplaceAttr. It writes a
// time.Duration as Go writes it ("500ms", "1m30s"): slog's JSON handler
// would write its nanoseconds ("poll_interval":500000000), which no one
// reads at a glance, and the text handler already writes the string.
func ReplaceAttr(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}
