// Package cloudevents maps outbox events to CloudEvents 1.0 context
// attributes, for the drivers' format=cloudevents: the binary content mode,
// where the payload stays the message body, untouched, and the attributes
// travel next to it as the broker's headers, each driver naming them as its
// protocol binding says (HTTP and NATS "ce-", Kafka "ce_", AMQP
// "cloudEvents:"). The mapping lives here once, so every broker carries the
// same attributes with the same values:
//
//	specversion      1.0
//	id               event_id
//	source           ce_source=, or "/" and the outbox table
//	type             event_type
//	time             created_at, RFC 3339 in UTC
//	datacontenttype  the row's content-type header, when it has one
//	partitionkey     partition_key, when it has one (Partitioning extension)
//	traceparent      the row's traceparent header, when it has one, and
//	tracestate       tracestate likewise (Distributed Tracing extension)
package cloudevents

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/option"
)

// URL option names and values every driver reads.
const (
	// OptionFormat picks the message format: FormatRelay or
	// FormatCloudEvents.
	OptionFormat = "format"
	// OptionSource sets the source attribute.
	OptionSource = "ce_source"
	// FormatRelay is the default: the relay's X-Event-* headers.
	FormatRelay = "relay"
	// FormatCloudEvents is CloudEvents 1.0 in binary content mode.
	FormatCloudEvents = "cloudevents"
)

// SpecVersion is the CloudEvents version the attributes follow.
const SpecVersion = "1.0"

// SourceDefault is the source of events when neither ce_source= nor the
// program opening the publisher (publisher.WithTable) names one.
const SourceDefault = "/outbox"

// Attribute names the relay sets.
const (
	AttrSpecVersion     = "specversion"
	AttrID              = "id"
	AttrSource          = "source"
	AttrType            = "type"
	AttrTime            = "time"
	AttrDataContentType = "datacontenttype"
	AttrPartitionKey    = "partitionkey"
	AttrTraceparent     = "traceparent"
	AttrTracestate      = "tracestate"
)

// relayAttributes are the attributes the relay may set; a row header that
// would carry one of them under the binding's prefix is left out.
var relayAttributes = []string{AttrSpecVersion, AttrID, AttrSource, AttrType, AttrTime,
	AttrDataContentType, AttrPartitionKey, AttrTraceparent, AttrTracestate}

// Config is what a URL's format and ce_source options say.
type Config struct {
	// Enabled is format=cloudevents.
	Enabled bool
	// Source is ce_source=; empty takes the table's (see Mapper).
	Source string
}

// Options are the format and ce_source options as a driver declares them.
type Options struct {
	format, source *option.String
}

// Declare adds format and ce_source to a driver's options, documented on
// one row with doc: the driver's words for where the attributes travel.
func Declare(s *option.Set, doc string) *Options {
	o := &Options{
		format: s.String(OptionFormat, FormatRelay, doc).CheckEmpty().Check(func(v string) error {
			if v == FormatRelay || v == FormatCloudEvents {
				return nil
			}
			return fmt.Errorf("is not one of %s (the default: X-Event-* headers), %s (CloudEvents 1.0, binary content mode)", FormatRelay, FormatCloudEvents)
		}),
		source: s.String(OptionSource, "", "").JoinRow().CheckEmpty().Check(checkSource),
	}
	s.Rule(func(v option.Values) error {
		if v.Has(OptionSource) && o.format.Get(v) != FormatCloudEvents {
			return fmt.Errorf("%s= sets the CloudEvents source: it needs %s=%s", OptionSource, OptionFormat, FormatCloudEvents)
		}
		return nil
	})
	return o
}

// Get returns what the URL's format and ce_source say.
func (o *Options) Get(v option.Values) Config {
	return Config{Enabled: o.format.Get(v) == FormatCloudEvents, Source: o.source.Get(v)}
}

// standalone reads the two options outside a driver's declaration.
var (
	standalone        = option.New("")
	standaloneOptions = Declare(standalone, "")
)

// ParseOptions reads format and ce_source from a query that holds no other
// option.
func ParseOptions(q url.Values) (Config, error) {
	v, err := standalone.Parse(q)
	if err != nil {
		return Config{}, err
	}
	return standaloneOptions.Get(v), nil
}

// checkSource accepts a non-empty URI-reference (RFC 3986), as the source
// attribute must be.
func checkSource(s string) error {
	if s == "" {
		return errors.New("the source cannot be empty; use a URI-reference such as /orders or urn:example:orders")
	}
	if err := checkString(s); err != nil {
		return err
	}
	if strings.ContainsAny(s, " \"<>\\^`{|}") {
		return errors.New("not a URI-reference: percent-encode spaces and \"<>\\^`{|}")
	}
	if _, err := url.Parse(s); err != nil {
		return errors.New("not a URI-reference such as /orders or urn:example:orders")
	}
	return nil
}

// Mapper turns events into attributes with one source.
type Mapper struct {
	source string
}

// Mapper returns the mapper for cfg, or nil when CloudEvents are off. The
// source is cfg.Source, else "/" and the table publisher.WithTable put in
// ctx, else SourceDefault.
func (cfg Config) Mapper(ctx context.Context) *Mapper {
	if !cfg.Enabled {
		return nil
	}
	source := cfg.Source
	if source == "" {
		source = SourceDefault
		if t := publisher.Table(ctx); t != "" {
			source = "/" + t
		}
	}
	return &Mapper{source: source}
}

// Source is the source attribute of every event.
func (m *Mapper) Source() string { return m.source }

// Attribute is one context attribute, its name without a binding's prefix
// and its value in canonical string form.
type Attribute struct {
	Name, Value string
}

// Attributes returns e's context attributes, in the order of the package
// comment, leaving out the optional ones it has no value for. rowHeaders
// are e's parsed headers (outbox.ParseHeaders), whose names are matched
// without regard to letter case. It fails for an event no CloudEvent can
// describe: one whose event_type, partition_key or trace headers hold a
// control character or invalid UTF-8, which the spec forbids in strings.
func (m *Mapper) Attributes(e *outbox.Event, rowHeaders map[string]string) ([]Attribute, error) {
	attrs := make([]Attribute, 0, len(relayAttributes))
	attrs = append(attrs,
		Attribute{AttrSpecVersion, SpecVersion},
		Attribute{AttrID, e.ID.String()},
		Attribute{AttrSource, m.source},
		Attribute{AttrType, e.Type})
	if err := checkString(e.Type); err != nil {
		return nil, fmt.Errorf("event_type cannot be a CloudEvents type: %w", err)
	}
	if e.Type == "" {
		return nil, errors.New("event_type cannot be a CloudEvents type: it is empty")
	}
	if !e.CreatedAt.IsZero() {
		attrs = append(attrs, Attribute{AttrTime, e.CreatedAt.UTC().Format(time.RFC3339Nano)})
	}
	v, ok, err := lookup(rowHeaders, "content-type", AttrDataContentType)
	if err != nil {
		return nil, err
	}
	if ok && v != "" {
		if err := checkString(v); err != nil {
			return nil, fmt.Errorf("header content-type cannot be a CloudEvents datacontenttype: %w", err)
		}
		attrs = append(attrs, Attribute{AttrDataContentType, v})
	}
	if e.PartitionKey != "" {
		if err := checkString(e.PartitionKey); err != nil {
			return nil, fmt.Errorf("partition_key cannot be a CloudEvents partitionkey: %w", err)
		}
		attrs = append(attrs, Attribute{AttrPartitionKey, e.PartitionKey})
	}
	for _, name := range []string{AttrTraceparent, AttrTracestate} {
		v, ok, err := lookup(rowHeaders, name, name)
		if err != nil {
			return nil, err
		}
		if ok && v != "" {
			if err := checkString(v); err != nil {
				return nil, fmt.Errorf("header %s cannot be a CloudEvents %s: %w", name, name, err)
			}
			attrs = append(attrs, Attribute{name, v})
		}
	}
	return attrs, nil
}

// lookup finds name in h in any letter case. Two spellings of it
// ("Content-Type" and "content-type") are an error: one attribute holds
// one value, so the other would be lost, and which one by map order.
func lookup(h map[string]string, name, attr string) (string, bool, error) {
	var found, value string
	for k, v := range h {
		if !strings.EqualFold(k, name) {
			continue
		}
		if found != "" {
			a, b := min(found, k), max(found, k)
			return "", false, fmt.Errorf("headers %q and %q: both give the CloudEvents attribute %s, which holds one value; keep one", a, b, attr)
		}
		found, value = k, v
	}
	return value, found != "", nil
}

// IsRelayAttribute reports whether a row header named name would carry,
// under the binding's prefix, an attribute the relay sets; such a header
// is left out, so a message never holds two values for one attribute.
// Other prefixed row headers (ce-subject, say) travel as they are and
// become attributes of their own. Letter case is ignored.
func IsRelayAttribute(prefix, name string) bool {
	if len(name) <= len(prefix) || !strings.EqualFold(name[:len(prefix)], prefix) {
		return false
	}
	rest := name[len(prefix):]
	for _, a := range relayAttributes {
		if strings.EqualFold(rest, a) {
			return true
		}
	}
	return false
}

// checkString applies the CloudEvents String rule: Unicode text without
// the control characters U+0000–U+001F and U+007F–U+009F.
func checkString(s string) error {
	if !utf8.ValidString(s) {
		return errors.New("not valid UTF-8")
	}
	for _, r := range s {
		if r < 0x20 || r >= 0x7f && r <= 0x9f {
			return fmt.Errorf("it holds the control character %U, which CloudEvents strings cannot", r)
		}
	}
	return nil
}

// PercentEncode encodes v as the HTTP and NATS bindings require of header
// values: space, '"', '%' and every byte outside printable ASCII become
// %XY (UTF-8 bytes, upper-case hex); the rest is left as it is.
func PercentEncode(v string) string {
	clean := true
	for i := 0; i < len(v); i++ {
		if needsEscape(v[i]) {
			clean = false
			break
		}
	}
	if clean {
		return v
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(v) + 16)
	for i := 0; i < len(v); i++ {
		c := v[i]
		if needsEscape(c) {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0xf])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func needsEscape(c byte) bool {
	return c <= ' ' || c > '~' || c == '"' || c == '%'
}
