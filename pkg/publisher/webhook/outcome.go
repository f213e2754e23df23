// This file: what an answer, or its absence, means for the event.

package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/outbox-relay/relay/internal/redact"
	"github.com/outbox-relay/relay/pkg/publisher"
)

// noAnswer classifies a request that got no HTTP answer: refused, DNS,
// TLS, a reset or a timeout. The endpoint, not the event, is at fault.
func (p *Publisher) noAnswer(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return publisher.Unavailable(fmt.Errorf("webhook: POST to %s cut off: %w", p.origin, ctx.Err()))
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // its text repeats the URL, whose path may hold a token
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return publisher.Unavailable(fmt.Errorf("webhook: POST to %s: no answer within %s (timeout): %w", p.origin, p.cfg.Timeout, err))
	case connectionDropped(err):
		// The endpoint took the connection and closed it under the
		// request: it may be this event that makes it fall over, which the
		// engine finds out by sending it alone.
		return publisher.Dropped(fmt.Errorf("webhook: POST to %s: the connection closed before an answer: %w", p.origin, err))
	}
	return publisher.Unavailable(fmt.Errorf("webhook: POST to %s: %w", p.origin, err))
}

// connectionDropped reports whether err is a connection closed under a
// request, as opposed to one that could not be made (refused, DNS, TLS) or
// an answer that did not come in time.
func connectionDropped(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return false
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		strings.Contains(err.Error(), "server closed idle connection")
}

// outcome classifies an HTTP answer and consumes its body.
func (p *Publisher) outcome(resp *http.Response) error {
	defer func() {
		_, _ = io.CopyN(io.Discard, resp.Body, drainLimit)
		_ = resp.Body.Close()
	}()
	s := resp.StatusCode
	if s >= 200 && s < 300 {
		return nil
	}
	status := fmt.Sprintf("%d %s", s, http.StatusText(s))
	if s >= 300 && s < 400 {
		return publisher.Permanent(fmt.Errorf("webhook: %s answered %s, Location %s: redirects are not followed; point PUBLISHER_URL at the final address",
			p.origin, status, quoteExcerpt(redact.URL(resp.Header.Get("Location")))))
	}
	head, _ := io.ReadAll(io.LimitReader(resp.Body, excerptBytes+1))
	msg := fmt.Sprintf("webhook: %s answered %s", p.origin, status)
	if len(bytes.TrimSpace(head)) > 0 {
		msg += ": " + textExcerpt(string(head))
	}
	switch {
	case s == http.StatusRequestTimeout, s == http.StatusTooEarly, s == http.StatusTooManyRequests, s >= 500 && s < 600:
		if d, ok := retryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			return publisher.RetryAfter(fmt.Errorf("%s (Retry-After %s)", msg, d), d)
		}
		return errors.New(msg)
	case s >= 400 && s < 500:
		return publisher.Permanent(errors.New(msg))
	}
	// 1xx as a final answer, or beyond 599: nothing HTTP defines; try again.
	return errors.New(msg + " (not a status HTTP defines for an answer)")
}

// quoteExcerpt returns the start of s, at most excerptBytes, quoted so that
// control characters and invalid UTF-8 arrive escaped.
func quoteExcerpt(s string) string {
	if len(s) <= excerptBytes {
		return strconv.Quote(s)
	}
	cut := excerptBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "…"
}

// textExcerpt returns the start of a response body as the text it is, for
// last_error: runs of whitespace (line breaks included) as one space, other
// control and invisible characters and invalid UTF-8 escaped (\x00,
// \u200b, \xff) so that nothing unseen reaches a log line or the console,
// at most excerptBytes of s and of the result, with … when cut.
func textExcerpt(s string) string {
	cut := len(s) > excerptBytes
	if cut {
		end := excerptBytes
		for end > 0 && !utf8.RuneStart(s[end]) {
			end--
		}
		s = s[:end]
	}
	var b strings.Builder
	space := false
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		var piece string
		switch {
		case r == utf8.RuneError && n == 1:
			piece = fmt.Sprintf(`\x%02x`, s[i])
		case unicode.IsSpace(r):
			space = b.Len() > 0
			i += n
			continue
		case unicode.IsPrint(r):
			piece = s[i : i+n]
		default:
			piece = strings.Trim(strconv.QuoteRuneToASCII(r), "'")
		}
		if space {
			piece = " " + piece
			space = false
		}
		if b.Len()+len(piece) > excerptBytes {
			cut = true
			break
		}
		b.WriteString(piece)
		i += n
	}
	if cut {
		b.WriteString("…")
	}
	return b.String()
}

// retryAfter parses a Retry-After value: delay-seconds or an HTTP date.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseUint(v, 10, 64); err == nil {
		const maxSeconds = 1 << 32 // far beyond any RETRY_MAX_DELAY, and no overflow
		return time.Duration(min(n, maxSeconds)) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0).Round(time.Second), true
	}
	return 0, false
}
