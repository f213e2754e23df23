package webhook_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/outbox-relay/relay/internal/harness/webhooktest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/publishertest"
)

// TestDotSegmentsInThePathGoDead fills path placeholders with "." and
// "..": URL normalisation removes such segments (RFC 3986), so a proxy or
// router would hand the request to another path than the one written.
// Those events go DEAD naming the field; dots that are not a whole
// segment, or that the URL's own path holds, travel as written.
func TestDotSegmentsInThePathGoDead(t *testing.T) {
	t.Parallel()
	rcv := webhooktest.Start(t)
	cases := []struct {
		path, typ, key string
		want           string // "" for delivered, as the path that arrives
		err            []string
	}{
		{"/in/{event_type}/keys/{partition_key}", "..", "k", "", []string{`event_type ".." cannot fill the path segment {event_type}`, "dot segment", "RFC 3986"}},
		{"/in/{event_type}/keys/{partition_key}", "orders", ".", "", []string{`partition_key "." cannot fill the path segment {partition_key}`}},
		{"/in/{event_type}{partition_key}", ".", ".", "", []string{`event_type "." and partition_key "."`}},
		{"/in/{event_type}/keys/{partition_key}", "...", "a..", "/in/.../keys/a..", nil},
		{"/in/{event_type}.json", ".", "k", "/in/..json", nil},
		{"/in/./{event_type}", "orders", "k", "/in/./orders", nil},
	}
	for _, c := range cases {
		p := openPublisher(t, signedURL(t, rcv, c.path, ""))
		e := newEvent(c.typ, c.key, 0)
		err := publishertest.Publish(t, p, e)[0]
		if c.want != "" {
			if err != nil {
				t.Errorf("%s with type %q key %q: %v, want it delivered", c.path, c.typ, c.key, err)
				continue
			}
			got := rcv.Delivered(t, 1, func(r *webhooktest.Request) bool { return r.Header.Get("webhook-id") == e.ID.String() })
			if got[0].Path != c.want {
				t.Errorf("%s with type %q key %q arrived at %q, want %q", c.path, c.typ, c.key, got[0].Path, c.want)
			}
			continue
		}
		if !publisher.IsPermanent(err) || publisher.IsUnavailable(err) {
			t.Errorf("%s with type %q key %q: %v, want DEAD", c.path, c.typ, c.key, err)
			continue
		}
		for _, w := range c.err {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q does not say %q", err, w)
			}
		}
	}
	if n := len(rcv.Requests()); n != 3 {
		t.Errorf("%d requests reached the endpoint, want only the 3 delivered events", n)
	}
}

// TestHeaderValuesArriveAsWritten sends header values HTTP can carry that
// a careless rule might refuse or a client might alter: inner runs of
// spaces and tabs, bytes that are not UTF-8 in the partition key, and
// characters outside ASCII. They must arrive byte for byte, over HTTP/1.1.
func TestHeaderValuesArriveAsWritten(t *testing.T) {
	t.Parallel()
	rcv := webhooktest.Start(t)
	p := openPublisher(t, signedURL(t, rcv, "/", ""))
	e := newEvent("orders", "\xff\xfe  key\twith\u00a0gaps", 0)
	e.Headers = []byte(`{"x-note":"a  b\t\tc","x-utf8":"\u00a0é\u3000"}`)
	publishertest.RequireDelivered(t, publishertest.Publish(t, p, e))
	r := rcv.Delivered(t, 1, nil)[0]
	for k, v := range map[string]string{outbox.HeaderPartitionKey: e.PartitionKey, "X-Note": "a  b\t\tc", "X-Utf8": "\u00a0é\u3000"} {
		if got := r.Header.Values(k); !slices.Equal(got, []string{v}) {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
}
