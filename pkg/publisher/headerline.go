package publisher

import "errors"

// Why a value cannot travel in a MIME-style header: the errors of
// CheckHeaderLine, which drivers wrap with the field that held the value.
var (
	ErrHeaderLineBreak = errors.New("value contains a line break (CR or LF): in NATS and HTTP headers a line break ends the header, so it cannot be carried as written")
	ErrHeaderEdgeSpace = errors.New("value begins or ends with white space (space or tab): NATS and HTTP strip it from header values, so it cannot be carried as written")
)

// CheckHeaderLine reports whether v can be the value of a header in a
// protocol whose headers are MIME-style text lines, "Name: value" ended by
// CRLF: NATS and HTTP/1.1. Such a value cannot hold a line break, and the
// space and tabs around it are not part of it: nats.go and Go's HTTP client
// trim them before sending (and turn CR and LF into spaces), and the
// readers trim again. A value that breaks either rule would arrive altered,
// so the event is refused instead; the relay never changes a value in
// transit behind the consumer's back.
func CheckHeaderLine(v string) error {
	for i := 0; i < len(v); i++ {
		if v[i] == '\r' || v[i] == '\n' {
			return ErrHeaderLineBreak
		}
	}
	if v != "" && (blank(v[0]) || blank(v[len(v)-1])) {
		return ErrHeaderEdgeSpace
	}
	return nil
}

// blank reports the white space MIME-style readers and writers trim from
// a value's ends (line breaks are refused before).
func blank(c byte) bool { return c == ' ' || c == '\t' }
