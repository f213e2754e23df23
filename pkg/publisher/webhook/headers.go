// This file: the headers of each request: the row's, the relay's, the signature.

package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/cloudevents"
)

// Standard Webhooks header names.
const (
	headerWebhookID        = "Webhook-Id"
	headerWebhookTimestamp = "Webhook-Timestamp"
	headerWebhookSignature = "Webhook-Signature"
)

// cePrefix starts the header of each CloudEvents attribute (HTTP binding).
const cePrefix = "ce-"

// eventURL is the endpoint for e, with the placeholders filled in. It
// fails when the values make a path segment "." or "..": URL
// normalisation (RFC 3986 remove_dot_segments, done by proxies, servers
// and routers) drops such a segment, and ".." the one before it, so the
// request would reach another path than the one written. Path escaping
// leaves dots alone, and an escaped dot (%2E) is the same character to a
// normaliser.
func (p *Publisher) eventURL(e *outbox.Event) (string, error) {
	path := p.cfg.Path
	if p.templated {
		path = strings.ReplaceAll(path, placeholderType, url.PathEscape(e.Type))
		path = strings.ReplaceAll(path, placeholderKey, url.PathEscape(e.PartitionKey))
		if err := p.checkDotSegments(e, path); err != nil {
			return "", err
		}
	}
	return p.origin + path + p.query, nil
}

// checkDotSegments compares the filled path with the template segment by
// segment (escaped values hold no "/", so they line up): a "." or ".."
// segment the template did not have came from the event.
func (p *Publisher) checkDotSegments(e *outbox.Event, path string) error {
	tmpl := p.cfg.Path
	for {
		seg, rest, more := strings.Cut(path, "/")
		tseg, trest, _ := strings.Cut(tmpl, "/")
		if (seg == "." || seg == "..") && seg != tseg {
			var fields []string
			if strings.Contains(tseg, placeholderType) {
				fields = append(fields, fmt.Sprintf("event_type %q", publisher.Clip(e.Type)))
			}
			if strings.Contains(tseg, placeholderKey) {
				fields = append(fields, fmt.Sprintf("partition_key %q", publisher.Clip(e.PartitionKey)))
			}
			return fmt.Errorf("%s cannot fill the path segment %s: it would be %q, a dot segment that URL normalisation removes (RFC 3986), so the request would reach another path",
				strings.Join(fields, " and "), tseg, seg)
		}
		if !more {
			return nil
		}
		path, tmpl = rest, trest
	}
}

// header builds e's request headers: the static ones, the row's, then the
// relay's own, which no row can replace. It fails for a row header no HTTP
// request can carry.
func (p *Publisher) header(e *outbox.Event) (http.Header, error) {
	// The event's own fields travel as headers too; one with a line break
	// would make the HTTP client refuse the request, every time, and one
	// with white space around it would arrive trimmed. CloudEvents
	// attributes are percent-encoded, so only the spec's rules apply.
	if p.ce == nil {
		if err := validValue(e.Type); err != nil {
			return nil, fmt.Errorf("event_type %q cannot travel in the %s header: %w", publisher.Clip(e.Type), outbox.HeaderEventType, err)
		}
		if err := validValue(e.PartitionKey); err != nil {
			return nil, fmt.Errorf("partition_key %q cannot travel in the %s header: %w", publisher.Clip(e.PartitionKey), outbox.HeaderPartitionKey, err)
		}
	}
	rows, err := outbox.ParseHeaders(e.Headers)
	if err != nil {
		return nil, err
	}
	var attrs []cloudevents.Attribute
	if p.ce != nil {
		if attrs, err = p.ce.Attributes(e, rows); err != nil {
			return nil, err
		}
	}
	h := make(http.Header, len(p.cfg.Headers)+len(rows)+8)
	for k, v := range p.cfg.Headers {
		h[k] = v
	}
	contentType := p.cfg.ContentType
	// spelling maps each name sent, canonical, to the row's spelling of it.
	var spelling map[string]string
	// Sorted, so that the error for two spellings of one name is always
	// the same.
	for _, k := range slices.Sorted(maps.Keys(rows)) {
		v := rows[k]
		if outbox.IsEventHeader(k) || webhookHeader(k) || p.ce != nil && cloudevents.IsRelayAttribute(cePrefix, k) {
			continue // the relay's own win
		}
		if err := validName(k); err != nil {
			return nil, fmt.Errorf("header %q: %w", k, err)
		}
		if err := validValue(v); err != nil {
			return nil, fmt.Errorf("header %q: %w", k, err)
		}
		// HTTP names ignore letter case (RFC 9110): "Tenant" and "tenant"
		// are one field, and would arrive as one header with two values
		// where the row has two headers.
		name := http.CanonicalHeaderKey(k)
		if other, dup := spelling[name]; dup {
			return nil, fmt.Errorf("headers %q and %q: HTTP header names ignore letter case, so the two would arrive as one header with two values; rename one", other, k)
		}
		if spelling == nil {
			spelling = make(map[string]string, len(rows))
		}
		spelling[name] = k
		switch {
		case reservedHeader(k):
			return nil, fmt.Errorf("header %q: the HTTP client sets it (RFC 9110 connection and framing header); rename it", k)
		case strings.EqualFold(k, "Content-Type"):
			contentType = v
			continue
		}
		if _, static := p.cfg.Headers[name]; static {
			continue
		}
		if name == "Authorization" && p.cfg.User != nil {
			continue // the URL's credentials, like a header option, win
		}
		h[name] = append(h[name], v)
	}
	id := e.ID.String()
	h["Content-Type"] = []string{contentType}
	if _, ok := h["User-Agent"]; !ok {
		h["User-Agent"] = []string{UserAgentDefault}
	}
	if p.ce == nil {
		h[outbox.HeaderEventID] = []string{id}
		h[outbox.HeaderEventType] = []string{e.Type}
		if e.PartitionKey != "" {
			h[outbox.HeaderPartitionKey] = []string{e.PartitionKey}
		}
	}
	for _, a := range attrs {
		if a.Name == cloudevents.AttrDataContentType {
			continue // Content-Type carries it, as the binding says
		}
		h[http.CanonicalHeaderKey(cePrefix+a.Name)] = []string{cloudevents.PercentEncode(a.Value)}
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	h[headerWebhookID] = []string{id}
	h[headerWebhookTimestamp] = []string{ts}
	if len(p.keys) > 0 {
		h[headerWebhookSignature] = []string{p.sign(id, ts, e.Payload)}
	}
	return h, nil
}

// sign returns the webhook-signature value: "v1,<base64 HMAC-SHA256 of
// id.timestamp.body>" per key, space-separated.
func (p *Publisher) sign(id, ts string, body []byte) string {
	sigs := make([]string, len(p.keys))
	for i, key := range p.keys {
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(id))
		mac.Write([]byte{'.'})
		mac.Write([]byte(ts))
		mac.Write([]byte{'.'})
		mac.Write(body)
		sigs[i] = "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	}
	return strings.Join(sigs, " ")
}

// validName checks a header name against RFC 9110's token rule.
func validName(name string) error {
	if name == "" {
		return errors.New("empty header name")
	}
	for i := 0; i < len(name); i++ {
		if !tokenChar(name[i]) {
			return errors.New("name is not an HTTP token (RFC 9110 allows letters, digits and !#$%&'*+-.^_`|~)")
		}
	}
	return nil
}

// tokenChar reports whether c is an RFC 9110 tchar.
func tokenChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// validValue checks a header value against RFC 9110's field-value rule:
// visible characters, spaces and tabs, no line break or other control, and
// no white space at either end, which is not part of the value: Go's client
// trims it on HTTP/1.1 and receivers and proxies strip it on any version
// (publisher.CheckHeaderLine, the rule NATS shares).
func validValue(v string) error {
	if err := publisher.CheckHeaderLine(v); err != nil {
		return err
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return errors.New("value contains a control character (RFC 9110 allows visible characters, spaces and tabs in HTTP header values)")
		}
	}
	return nil
}

// reservedHeader reports the headers that belong to the HTTP connection
// or message framing: the client sets them, HTTP/2 forbids most, and a
// row's "Connection: close" or "Content-Length" would break the exchange.
func reservedHeader(name string) bool {
	switch strings.ToLower(name) {
	case "host", "content-length", "transfer-encoding", "connection", "keep-alive",
		"proxy-connection", "upgrade", "te", "trailer", "expect":
		return true
	}
	return false
}

// webhookHeader reports the Standard Webhooks headers the relay sets.
func webhookHeader(name string) bool {
	return strings.EqualFold(name, headerWebhookID) || strings.EqualFold(name, headerWebhookTimestamp) ||
		strings.EqualFold(name, headerWebhookSignature)
}
