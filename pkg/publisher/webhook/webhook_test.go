package webhook_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/outbox-relay/relay/internal/harness/webhooktest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/publishertest"
	"github.com/outbox-relay/relay/pkg/publisher/webhook"
)

func newEvent(typ, key string, n int) outbox.Event {
	return outbox.Event{
		ID:           uuid.Must(uuid.NewV7()),
		Type:         typ,
		PartitionKey: key,
		Payload:      []byte(fmt.Sprintf(`{"n":%d}`, n)),
		CreatedAt:    time.Now(),
	}
}

// signedURL is rcv's URL for path with a secret file for webhooktest.Secret
// and the extra options in query (starting with '&').
func signedURL(t testing.TB, rcv *webhooktest.Receiver, path, query string) string {
	t.Helper()
	q := "secret_file=" + url.QueryEscape(webhooktest.SecretFile(t, webhooktest.Secret)) + query
	if c := rcv.Certs(); c != nil {
		q += "&tls_ca=" + url.QueryEscape(c.CA)
	}
	return rcv.URL(path + "?" + q)
}

func parse(t *testing.T, raw string) (webhook.Config, error) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("url.Parse(%q): %v", raw, err)
	}
	return webhook.ParseURL(u)
}

func TestParseURLDefaultsAndOptions(t *testing.T) {
	t.Parallel()
	cfg, err := parse(t, "https://hooks.example.com/in/{event_type}/%7Bpartition_key%7D/a%2Fb?secret_env=HOOK_SECRET")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Scheme != "https" || cfg.Host != "hooks.example.com" || cfg.Path != "/in/{event_type}/{partition_key}/a%2Fb" ||
		cfg.Query != "" || cfg.Timeout != webhook.TimeoutDefault || cfg.Concurrency != webhook.ConcurrencyDefault ||
		cfg.MaxIdleConns != webhook.ConcurrencyDefault || cfg.ContentType != webhook.ContentTypeDefault ||
		cfg.SecretEnv != "HOOK_SECRET" || cfg.Unsigned || len(cfg.Headers) != 0 {
		t.Errorf("defaults: %+v", cfg)
	}

	cfg, err = parse(t, "http://u:p@127.0.0.1:8080?unsigned=true&timeout=3s&concurrency=8&max_idle_conns=4"+
		"&header=X-Tenant:%20acme&header=X-Tenant:beta&query=code=a%2Bb%3D&query=flag&content_type=application/json&h2c=true")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Path != "/" || cfg.Query != "code=a%2Bb%3D&flag=" || cfg.Timeout != 3*time.Second || cfg.Concurrency != 8 ||
		cfg.MaxIdleConns != 4 || cfg.ContentType != "application/json" || !cfg.H2C || !cfg.Unsigned ||
		strings.Join(cfg.Headers.Values("X-Tenant"), ",") != "acme,beta" || cfg.User.Username() != "u" {
		t.Errorf("options: %+v", cfg)
	}
}

func TestParseURLRefusesMistakes(t *testing.T) {
	t.Parallel()
	const secret = "Zq9NotInAnyError"
	sec := "&secret_file=/etc/relay/hook"
	for _, c := range []struct{ url, want string }{
		{"http://h/x?secret=whsec_" + secret, "use secret_file=PATH or secret_env=NAME"},
		{"http://h/x?unsigned=true&secrets_file=x", `unknown option "secrets_file"`},
		{"http://h/x?unsigned=true&sort=asc", "query=name=value"},
		{"http://h/x", "no signing secret: add secret_file=PATH or secret_env=NAME"},
		{"http://h/x?secret_file=a&secret_env=B", "keep one"},
		{"http://h/x?unsigned=true&secret_env=B", "unsigned=true contradicts"},
		{"http://h/x?secret_env=", "need a value"},
		{"http://h/x?tls_ca=/ca.pem" + sec, "tls_* options need an https:// URL"},
		{"https://h/x?h2c=true" + sec, "h2c=true is HTTP/2 without TLS"},
		{"https://h/x?tls_cert=/c.pem" + sec, "tls_cert and tls_key go together"},
		{"http://h/x?timeout=0s" + sec, "timeout"},
		{"http://h/x?concurrency=0" + sec, "concurrency"},
		{"http://h/x?concurrency=100000" + sec, "from 1 to 4096"},
		{"http://h/x?timeout=1s&timeout=2s" + sec, "give it once"},
		{"http://h/x?header=X-Api-Key" + sec, "want header=Name:Value"},
		{"http://h/x?header=X-Api-Key:" + secret + "%0D%0AX-Injected:1" + sec, `header "X-Api-Key": value contains a line break`},
		{"http://h/x?header=X-Api-Key:" + secret + "%20" + sec, `header "X-Api-Key": value begins or ends with white space`},
		{"http://h/x?header=Bad%20Name:" + secret + sec, "name is not an HTTP token"},
		{"http://h/x?header=Host:evil.example" + sec, `header "Host"`},
		{"http://h/x?header=Transfer-Encoding:chunked" + sec, `header "Transfer-Encoding"`},
		{"http://h/x?header=Webhook-Signature:v1," + secret + sec, `header "Webhook-Signature"`},
		{"http://h/x?header=X-Event-ID:forged" + sec, `header "X-Event-ID"`},
		{"http://h/x?header=Content-Type:text/plain" + sec, "content_type="},
		{"http://u:" + secret + "@h/x?header=Authorization:Bearer%20" + secret + sec, "both authenticate"},
		{"http://h/x?query=%3Dv" + sec, "query option 1 has no name"},
		{"http://h/x?content_type=" + sec, "content_type"},
		{"http://h/{eventType}?" + sec[1:], "path placeholder {eventType} is unknown"},
		{"http://h/x?header=X-A:a" + sec + "#b", "percent-encode it as %23"},
		{"http:///x?" + sec[1:], "has no host"},
	} {
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatalf("url.Parse(%q): %v", c.url, err)
		}
		_, err = webhook.ParseURL(u)
		publishertest.RequireRefused(t, c.url, err, c.want, secret)
	}
}

func TestOpenRefusesBadSecretsWithoutQuotingThem(t *testing.T) {
	t.Parallel()
	rcv := webhooktest.Start(t)
	const secret = "Zq9NotInAnyErrorZq9NotInAnyError"
	short := base64.StdEncoding.EncodeToString([]byte("eight by"))
	env := map[string]string{"EMPTY": " ", "NOT_WHSEC": secret, "HOOK_SECRET": webhooktest.Secret}
	ctx := publisher.WithEnv(context.Background(), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	for _, c := range []struct{ query, want string }{
		{"secret_file=/nonexistent/hook-secret", "secret_file: open /nonexistent/hook-secret"},
		{"secret_file=" + url.QueryEscape(webhooktest.SecretFile(t, secret)), "does not start with whsec_"},
		{"secret_file=" + url.QueryEscape(webhooktest.SecretFile(t, "whsec_"+secret+"!")), "is not base64"},
		{"secret_file=" + url.QueryEscape(webhooktest.SecretFile(t, "whsec_"+short)), "8-byte key; use at least 16"},
		{"secret_file=" + url.QueryEscape(webhooktest.SecretFile(t, "\n")), "holds no secret"},
		{"secret_env=MISSING", "MISSING is not set or empty"},
		{"secret_env=EMPTY", "EMPTY is not set or empty"},
		{"secret_env=NOT_WHSEC", "does not start with whsec_"},
	} {
		_, err := publisher.Open(ctx, rcv.URL("/?"+c.query))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.query, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("%s: error %q quotes the secret", c.query, err)
		}
	}
	// The process environment is not the driver's to read.
	if _, err := publisher.Open(context.Background(), rcv.URL("/?secret_env=HOOK_SECRET")); err == nil ||
		!strings.Contains(err.Error(), "publisher.WithEnv") {
		t.Errorf("secret_env without an environment: %v", err)
	}
	p, err := publisher.Open(ctx, rcv.URL("/?secret_env=HOOK_SECRET"))
	if err != nil {
		t.Fatalf("secret_env=HOOK_SECRET: %v", err)
	}
	defer func() { _ = p.Close(context.Background()) }()
	publishertest.RequireDelivered(t, publishertest.Publish(t, p, newEvent("a", "", 0)))
	verify(t, webhooktest.Secret, rcv.Delivered(t, 1, nil)[0])
}

// verify checks a request's signature by hand, from the Standard Webhooks
// definition, and with the Standard Webhooks library.
func verify(t *testing.T, secret string, r webhooktest.Request) {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		t.Fatal(err)
	}
	id, ts := r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp")
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "." + string(r.Body)))
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	if !strings.Contains(" "+r.Header.Get("webhook-signature")+" ", " "+want+" ") {
		t.Errorf("webhook-signature %q lacks %q", r.Header.Get("webhook-signature"), want)
	}
	sent, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || time.Since(time.Unix(sent, 0)).Abs() > time.Minute {
		t.Errorf("webhook-timestamp %q is not the current Unix time in seconds", ts)
	}
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	if err := wh.Verify(r.Body, r.Header); err != nil {
		t.Errorf("Standard Webhooks library: %v", err)
	}
}

func TestSignaturesVerifyIndependently(t *testing.T) {
	t.Parallel()
	rcv := webhooktest.Start(t)
	p := openPublisher(t, signedURL(t, rcv, "/", ""))
	batch := []outbox.Event{newEvent("a", "", 0), newEvent("a", "k", 1), {ID: uuid.New(), Type: "empty"}}
	batch[1].Payload = []byte{0, 1, 2, '.', 0xff} // not text: the HMAC covers bytes
	publishertest.RequireDelivered(t, publishertest.Publish(t, p, batch...))
	got := rcv.Delivered(t, len(batch), nil)
	for _, r := range got {
		verify(t, webhooktest.Secret, r)
		if r.Header.Get("webhook-id") != r.Header.Get(outbox.HeaderEventID) {
			t.Errorf("webhook-id %q is not the event id %q", r.Header.Get("webhook-id"), r.Header.Get(outbox.HeaderEventID))
		}
	}

	// A signature over other bytes, or with another key, must not pass.
	wh, _ := standardwebhooks.NewWebhook(webhooktest.Secret)
	if err := wh.Verify(append(got[0].Body, ' '), got[0].Header); err == nil {
		t.Error("a changed body still verifies")
	}
	other, _ := standardwebhooks.NewWebhook("whsec_" + base64.StdEncoding.EncodeToString([]byte("another key of thirty-two bytes!")))
	if err := other.Verify(got[0].Body, got[0].Header); err == nil {
		t.Error("another key verifies the signature")
	}
}

func TestRotationSignsWithEverySecret(t *testing.T) {
	t.Parallel()
	rcv := webhooktest.Start(t)
	next := "whsec_" + base64.StdEncoding.EncodeToString([]byte("the next key, thirty-two bytes.."))
	file := webhooktest.SecretFile(t, webhooktest.Secret+"\n"+next)
	p := openPublisher(t, rcv.URL("/?secret_file="+url.QueryEscape(file)))
	publishertest.RequireDelivered(t, publishertest.Publish(t, p, newEvent("a", "", 0)))
	r := rcv.Delivered(t, 1, nil)[0]
	if n := len(strings.Fields(r.Header.Get("webhook-signature"))); n != 2 {
		t.Errorf("webhook-signature %q has %d signatures, want 2", r.Header.Get("webhook-signature"), n)
	}
	verify(t, webhooktest.Secret, r)
	verify(t, next, r)
}

func TestUnsignedSendsNoSignature(t *testing.T) {
	t.Parallel()
	rcv := webhooktest.Start(t)
	p := openPublisher(t, rcv.URL("/?unsigned=true"))
	e := newEvent("a", "", 0)
	publishertest.RequireDelivered(t, publishertest.Publish(t, p, e))
	r := rcv.Delivered(t, 1, nil)[0]
	if _, signed := r.Header["Webhook-Signature"]; signed {
		t.Error("unsigned=true sent webhook-signature")
	}
	if r.Header.Get("webhook-id") != e.ID.String() || r.Header.Get("webhook-timestamp") == "" {
		t.Errorf("unsigned request lacks webhook-id or webhook-timestamp: %v", r.Header)
	}
}

func TestRequestCarriesTheEvent(t *testing.T) {
	t.Parallel()
	rcv := webhooktest.Start(t)
	p := openPublisher(t, strings.Replace(
		signedURL(t, rcv, "/in/{event_type}/keys/{partition_key}",
			"&query=code=k%2By&query=v=2&header=X-Tenant:%20static&header=User-Agent:hooks/1&timeout=5s"),
		"http://", "http://relay:pw@", 1))
	e := newEvent("orders/created v2", "customer 7/α", 0)
	e.Headers = []byte(`{"CONTENT-TYPE":"application/json","x-tenant":"from-row","trace":"t1","n":3,` +
		`"webhook-signature":"v1,forged","X-Partition-Key":"forged","gone":null,"authorization":"Bearer from-row"}`)
	plain := newEvent("plain", "", 1)
	publishertest.RequireDelivered(t, publishertest.Publish(t, p, e, plain))

	byID := map[string]webhooktest.Request{}
	for _, r := range rcv.Delivered(t, 2, nil) {
		byID[r.Header.Get("webhook-id")] = r
	}
	r := byID[e.ID.String()]
	if r.Method != http.MethodPost || r.Path != "/in/orders%2Fcreated%20v2/keys/customer%207%2F%CE%B1" {
		t.Errorf("request %s %s", r.Method, r.Path)
	}
	if r.RawQuery != "code=k%2By&v=2" {
		t.Errorf("query %q: want the endpoint's own parameters only", r.RawQuery)
	}
	want := map[string]string{
		"Content-Type":            "application/json",
		"X-Tenant":                "static", // the header option wins over the row
		"User-Agent":              "hooks/1",
		"Trace":                   "t1",
		"N":                       "3",
		outbox.HeaderEventID:      e.ID.String(),
		outbox.HeaderEventType:    e.Type,
		outbox.HeaderPartitionKey: e.PartitionKey,
		"Authorization":           "Basic " + base64.StdEncoding.EncodeToString([]byte("relay:pw")),
	}
	for k, v := range want {
		if got := r.Header.Values(k); len(got) != 1 || got[0] != v {
			t.Errorf("header %s = %q, want just %q", k, got, v)
		}
	}
	if _, ok := r.Header["Gone"]; ok {
		t.Error("a null row header was sent")
	}
	if string(r.Body) != string(e.Payload) {
		t.Errorf("body %q, want %q", r.Body, e.Payload)
	}
	verify(t, webhooktest.Secret, r) // the row's forged signature is gone

	r = byID[plain.ID.String()]
	if r.Path != "/in/plain/keys/" || r.Header.Get("Content-Type") != webhook.ContentTypeDefault ||
		r.Header.Get(outbox.HeaderPartitionKey) != "" {
		t.Errorf("event without key or content type: path %s, headers %v", r.Path, r.Header)
	}
}

func TestContentTypeOption(t *testing.T) {
	t.Parallel()
	rcv := webhooktest.Start(t)
	p := openPublisher(t, rcv.URL("/?unsigned=true&content_type=application/json"))
	publishertest.RequireDelivered(t, publishertest.Publish(t, p, newEvent("a", "", 0)))
	if ct := rcv.Delivered(t, 1, nil)[0].Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want content_type's application/json", ct)
	}
}

func TestHeaderInjectionIsRefused(t *testing.T) {
	t.Parallel()
	rcv := webhooktest.Start(t)
	p := openPublisher(t, signedURL(t, rcv, "/", ""))
	bad := []string{
		`{"x-note":"a\r\nX-Injected: 1"}`,
		`{"x-note":"a\nX-Injected: 1"}`,
		`{"x-note":"a\u0000b"}`,
		`{"X-Injected: 1\r\nx-note":"a"}`,
		`{":authority":"evil.example"}`,
		`{"Host":"evil.example"}`,
		`{"Content-Length":"0"}`,
		`{"Transfer-Encoding":"chunked"}`,
		`{"Expect":"100-continue"}`,
	}
	batch := make([]outbox.Event, len(bad))
	for i, h := range bad {
		batch[i] = newEvent("a", "", i)
		batch[i].Headers = []byte(h)
	}
	for i, err := range publishertest.Publish(t, p, batch...) {
		if !publisher.IsPermanent(err) || !strings.Contains(err.Error(), "header ") {
			t.Errorf("row headers %s: %v, want a permanent error naming the header", bad[i], err)
		}
	}
	if n := len(rcv.Requests()); n != 0 {
		t.Errorf("%d requests reached the endpoint", n)
	}
}

func TestEventsOfAKeyArriveInOrderUnderConcurrency(t *testing.T) {
	t.Parallel()
	// Uneven answer times, so that requests in flight together finish in
	// any order.
	rcv := webhooktest.Start(t, webhooktest.Respond(func(w http.ResponseWriter, r *http.Request) {
		id := "0" + r.Header.Get("webhook-id") // "0" alone for a health check's HEAD
		delay := time.Duration(id[len(id)-1]%4) * time.Millisecond
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	const concurrency = 16
	p := openPublisher(t, signedURL(t, rcv, "/", fmt.Sprintf("&concurrency=%d", concurrency)))
	const n = 600
	batch := make([]outbox.Event, n)
	pos := map[string]int{}
	for i := range batch {
		key := fmt.Sprintf("k%d", i%6)
		if i%5 == 4 {
			key = ""
		}
		batch[i] = newEvent("a", key, i)
		pos[batch[i].ID.String()] = i
	}
	// Two batches at once, as the engine publishes MAX_IN_FLIGHT_BATCHES:
	// the concurrency limit holds over both.
	var wg sync.WaitGroup
	for _, half := range [][]outbox.Event{batch[:n/2], batch[n/2:]} {
		wg.Go(func() { publishertest.RequireDelivered(t, publishertest.Publish(t, p, half...)) })
	}
	wg.Wait()

	last := map[string]int{}
	for _, r := range rcv.Delivered(t, n, nil) {
		i := pos[r.Header.Get("webhook-id")]
		key := r.Header.Get(outbox.HeaderPartitionKey)
		if prev, ok := last[key]; ok && key != "" && i < prev && (i < n/2) == (prev < n/2) {
			t.Fatalf("key %s: event %d arrived after event %d of the same batch", key, i, prev)
		}
		last[key] = i
	}
	if m := rcv.MaxInFlight(); m < 4 || m > concurrency {
		t.Errorf("at most %d requests were in flight at once, want several and no more than %d", m, concurrency)
	}
	// A request may dial while the connection it could have had is on
	// its way back to the pool, so a few more than concurrency; without
	// keep-alive it would be one per request.
	if c := rcv.Connections(); c > 2*concurrency {
		t.Errorf("%d connections for %d requests, at most %d at once: keep-alive connections are not reused", c, n, concurrency)
	}
}

func TestAKeyStopsAtAFailedEvent(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	failing := map[string]int{} // event id → status to answer
	rcv := webhooktest.Start(t, webhooktest.Respond(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		status := failing[r.Header.Get("webhook-id")]
		mu.Unlock()
		if status == 0 {
			status = http.StatusNoContent
		}
		w.Header().Set("Retry-After", "7")
		w.WriteHeader(status)
	}))
	p := openPublisher(t, signedURL(t, rcv, "/", "&concurrency=4"))
	batch := make([]outbox.Event, 12)
	for i := range batch {
		batch[i] = newEvent("a", []string{"busy", "refused", "fine"}[i%3], i)
	}
	mu.Lock()
	failing[batch[3].ID.String()] = http.StatusServiceUnavailable  // busy: events 0, 3, 6, 9
	failing[batch[4].ID.String()] = http.StatusUnprocessableEntity // refused: 1, 4, 7, 10
	mu.Unlock()
	errs := publishertest.Publish(t, p, batch...)

	for i, err := range errs {
		switch i {
		case 3:
			if d, ok := publisher.RetryDelay(err); publisher.IsPermanent(err) || publisher.IsUnavailable(err) || !ok || d != 7*time.Second {
				t.Errorf("event answered 503: %v (delay %s), want retryable after 7s", err, d)
			}
		case 6, 9:
			// Held back, retryable, with the head's Retry-After.
			d, _ := publisher.RetryDelay(err)
			if err == nil || publisher.IsPermanent(err) || publisher.IsUnavailable(err) || d != 7*time.Second ||
				!strings.Contains(err.Error(), "not sent: event "+batch[3].ID.String()) {
				t.Errorf("event %d after a failed one of its key: %v (delay %s)", i, err, d)
			}
		case 4:
			if !publisher.IsPermanent(err) || !strings.Contains(err.Error(), "422") {
				t.Errorf("event answered 422: %v", err)
			}
		default:
			// A refused event never arrives, so the rest of its key
			// follows it.
			if err != nil {
				t.Errorf("event %d: %v", i, err)
			}
		}
	}
	for _, r := range rcv.Requests() {
		if id := r.Header.Get("webhook-id"); id == batch[6].ID.String() || id == batch[9].ID.String() {
			t.Errorf("an event behind a failed one of its key was sent")
		}
	}
}

func TestOutcomeOfEachAnswer(t *testing.T) {
	t.Parallel()
	type answer struct {
		status     int
		retryAfter string
		body       string
	}
	var mu sync.Mutex
	answers := map[string]answer{}
	rcv := webhooktest.Start(t, webhooktest.Respond(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		a := answers[r.Header.Get("webhook-id")]
		mu.Unlock()
		if a.retryAfter != "" {
			w.Header().Set("Retry-After", a.retryAfter)
		}
		if a.status/100 == 3 {
			w.Header().Set("Location", "http://u:Zq9Pass@new.example/hooks")
		}
		w.WriteHeader(a.status)
		_, _ = w.Write([]byte(a.body))
	}))
	p := openPublisher(t, signedURL(t, rcv, "/", ""))
	soon := time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
	past := time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat)
	const (
		delivered = "delivered"
		retry     = "retryable"
		dead      = "permanent"
	)
	long := strings.Repeat("\x00\x1b[31mé", 2000)
	// An endpoint's JSON error of 300 bytes arrives whole and as written.
	refusal := `{"error":"validation_failed","message":"amount.currency \"EUR\" does not match the account's currency","details":[` +
		strings.Repeat(`{"field":"amount.currency","code":"mismatch"},`, 4) + `{"field":"amount.value"}],"request_id":"req_7f3a9c2e1b"}`
	cases := []struct {
		answer
		class   string
		delay   time.Duration // -1: none
		wantErr string
	}{
		{answer{200, "", "ok"}, delivered, -1, ""},
		{answer{201, "", ""}, delivered, -1, ""},
		{answer{202, "", ""}, delivered, -1, ""},
		{answer{204, "", ""}, delivered, -1, ""},
		{answer{301, "", ""}, dead, -1, `Location "http://u:xxxxx@new.example/hooks"`},
		{answer{302, "", ""}, dead, -1, "302 Found"},
		{answer{307, "", ""}, dead, -1, "redirects are not followed"},
		{answer{308, "", ""}, dead, -1, "308 Permanent Redirect"},
		{answer{400, "", `{"error":"bad schema"}`}, dead, -1, `400 Bad Request: {"error":"bad schema"}`},
		{answer{401, "", ""}, dead, -1, "401 Unauthorized"},
		{answer{403, "", ""}, dead, -1, "403 Forbidden"},
		{answer{404, "", "no route"}, dead, -1, `404 Not Found: no route`},
		{answer{409, "", ""}, dead, -1, "409 Conflict"},
		{answer{410, "", ""}, dead, -1, "410 Gone"},
		{answer{413, "", ""}, dead, -1, "413"},
		{answer{422, "", ""}, dead, -1, "422 Unprocessable Entity"},
		{answer{408, "", ""}, retry, -1, "408 Request Timeout"},
		{answer{425, "", ""}, retry, -1, "425 Too Early"},
		{answer{429, "120", "slow down"}, retry, 120 * time.Second, `429 Too Many Requests: slow down (Retry-After 2m0s)`},
		{answer{429, soon, ""}, retry, 90 * time.Second, "Retry-After 1m"},
		{answer{503, past, ""}, retry, 0, "503 Service Unavailable"},
		{answer{503, "soon", ""}, retry, -1, "503"},
		{answer{500, "", "boom"}, retry, -1, `500 Internal Server Error: boom`},
		{answer{502, "", ""}, retry, -1, "502 Bad Gateway"},
		{answer{504, "", ""}, retry, -1, "504 Gateway Timeout"},
		{answer{599, "", ""}, retry, -1, "599"},
		{answer{400, "", long}, dead, -1, `400 Bad Request: \x00\x1b[31mé\x00`},
		{answer{422, "", refusal}, dead, -1, "422 Unprocessable Entity: " + refusal},
		{answer{400, "", "\r\n  line one\r\n\tline two \xff\r\n"}, dead, -1, `400 Bad Request: line one line two \xff`},
	}
	batch := make([]outbox.Event, len(cases))
	mu.Lock()
	for i, c := range cases {
		batch[i] = newEvent("a", "", i)
		answers[batch[i].ID.String()] = c.answer
	}
	mu.Unlock()
	for i, err := range publishertest.Publish(t, p, batch...) {
		c := cases[i]
		name := fmt.Sprintf("answer %d (Retry-After %q)", c.status, c.retryAfter)
		switch c.class {
		case delivered:
			if err != nil {
				t.Errorf("%s: %v, want delivered", name, err)
			}
			continue
		case retry:
			if err == nil || publisher.IsPermanent(err) || publisher.IsUnavailable(err) {
				t.Errorf("%s: %v, want retryable", name, err)
				continue
			}
		case dead:
			if !publisher.IsPermanent(err) {
				t.Errorf("%s: %v, want permanent", name, err)
				continue
			}
		}
		if !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("%s: error %q does not say %q", name, err, c.wantErr)
		}
		d, ok := publisher.RetryDelay(err)
		if c.delay < 0 && ok || c.delay >= 0 && (!ok || (d-c.delay).Abs() > 2*time.Second) {
			t.Errorf("%s: Retry-After delay %s (%v), want %s", name, d, ok, c.delay)
		}
		if len(err.Error()) > 1200 || strings.ContainsAny(err.Error(), "\x00\x1b\r\n") {
			t.Errorf("%s: error is %d bytes or holds control characters: %q", name, len(err.Error()), err)
		}
		if strings.Contains(err.Error(), "Zq9Pass") {
			t.Errorf("%s: error reveals the Location's password", name)
		}
	}
}

func TestNoAnswerMeansUnavailable(t *testing.T) {
	t.Parallel()
	// A port nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()

	plain := webhooktest.Start(t)
	tlsRcv := webhooktest.Start(t, webhooktest.TLS())
	mtls := webhooktest.Start(t, webhooktest.MutualTLS())
	file := url.QueryEscape(webhooktest.SecretFile(t, webhooktest.Secret))
	for _, c := range []struct {
		name, url, want string
		// mayDrop: with TLS 1.3 the server refuses a client certificate
		// after the handshake, so the client may learn it as a connection
		// closed under its request. Marked dropped, the engine checks the
		// endpoint, which fails the same way, and pauses all the same.
		mayDrop bool
	}{
		{"connection refused", "http://" + closed + "/?timeout=2s&secret_file=" + file, "connection refused", false},
		{"DNS failure", "http://no-such-host.invalid/?timeout=2s&secret_file=" + file, "no-such-host.invalid", false},
		{"TLS to a plain HTTP endpoint", "https://" + plain.Addr() + "/?timeout=10s&secret_file=" + file, "https://" + plain.Addr(), false},
		{"untrusted certificate", "https://" + tlsRcv.Addr() + "/?timeout=10s&secret_file=" + file, "certificate", false},
		{"no client certificate", "https://" + mtls.Addr() + "/?timeout=10s&tls_ca=" + url.QueryEscape(mtls.Certs().CA) + "&secret_file=" + file, "https://" + mtls.Addr(), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := openPublisher(t, c.url)
			for i, err := range publishertest.Publish(t, p, newEvent("a", "k", 0), newEvent("a", "", 1)) {
				if !publisher.IsUnavailable(err) || !strings.Contains(err.Error(), c.want) {
					t.Errorf("event %d: %v, want unavailable mentioning %q", i, err, c.want)
				}
				// A connection that could not be made says nothing about
				// the event: the engine must not search the batch for one.
				if publisher.IsDropped(err) && !c.mayDrop {
					t.Errorf("event %d: %v is marked dropped", i, err)
				}
			}
			if err := p.Ping(context.Background()); err == nil {
				t.Error("Ping succeeded")
			}
		})
	}

	// With the client certificate, the mutual TLS endpoint takes it.
	c := mtls.Certs()
	p := openPublisher(t, signedURL(t, mtls, "/", "&tls_cert="+url.QueryEscape(c.ClientCert)+"&tls_key="+url.QueryEscape(c.ClientKey)))
	publishertest.RequireDelivered(t, publishertest.Publish(t, p, newEvent("a", "", 0)))
	if r := mtls.Delivered(t, 1, nil)[0]; r.Proto != "HTTP/2.0" {
		t.Errorf("mutual TLS request over %s, want HTTP/2.0", r.Proto)
	}
}

func TestHangingEndpointTimesOutAsUnavailable(t *testing.T) {
	t.Parallel()
	rcv := webhooktest.Start(t, webhooktest.Respond(webhooktest.Hang))
	const concurrency = 4
	p := openPublisher(t, signedURL(t, rcv, "/", fmt.Sprintf("&timeout=300ms&concurrency=%d", concurrency)))
	batch := make([]outbox.Event, 100)
	for i := range batch {
		batch[i] = newEvent("a", fmt.Sprint(i%3), i)
		if i%2 == 0 {
			batch[i].PartitionKey = ""
		}
	}
	for i, err := range publishertest.Publish(t, p, batch...) {
		if !publisher.IsUnavailable(err) {
			t.Fatalf("event %d: %v, want unavailable", i, err)
		}
	}
	// Once a request timed out, the rest of the batch stays home instead
	// of waiting out the timeout in turn.
	if n := len(rcv.Requests()); n > concurrency {
		t.Errorf("%d requests reached a hanging endpoint; want at most the first %d in flight", n, concurrency)
	}
	errs := publishertest.Publish(t, p, newEvent("a", "", 0))
	if !strings.Contains(errs[0].Error(), "no answer within 300ms (timeout)") || publisher.IsDropped(errs[0]) {
		t.Errorf("timeout error %q does not say so, or is marked dropped", errs[0])
	}
}

func TestConnectionClosedUnderARequestIsDropped(t *testing.T) {
	t.Parallel()
	rcv := webhooktest.Start(t, webhooktest.Respond(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/crash" {
			webhooktest.CloseConnection(w, r)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	p := openPublisher(t, signedURL(t, rcv, "/{event_type}", "&concurrency=1"))
	errs := publishertest.Publish(t, p, newEvent("ok", "", 0), newEvent("crash", "", 1), newEvent("ok", "", 2))
	if errs[0] != nil {
		t.Errorf("event before the crash: %v", errs[0])
	}
	// The endpoint closed the connection under the request: the engine
	// is told, so that it can send the batch again in parts and find the
	// event that does it. What was not sent yet shares the verdict.
	for i, err := range errs[1:] {
		if !publisher.IsDropped(err) || !strings.Contains(err.Error(), "the connection closed before an answer") {
			t.Errorf("event %d: %v, want dropped", i+1, err)
		}
	}
	if err := p.Ping(context.Background()); err != nil {
		t.Errorf("Ping after a dropped connection: %v", err)
	}
	publishertest.RequireDelivered(t, publishertest.Publish(t, p, newEvent("ok", "", 3)))
}

func TestEndpointThatDiesMidBatch(t *testing.T) {
	t.Parallel()
	var (
		rcv  *webhooktest.Receiver
		mu   sync.Mutex
		seen int
	)
	rcv = webhooktest.Start(t, webhooktest.Respond(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen++
		n := seen
		mu.Unlock()
		if n == 40 {
			go rcv.Stop() // the process dies with requests in flight
		}
		if n >= 40 {
			<-r.Context().Done()
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	p := openPublisher(t, signedURL(t, rcv, "/", "&concurrency=8&timeout=5s"))
	batch := make([]outbox.Event, 300)
	for i := range batch {
		batch[i] = newEvent("a", fmt.Sprint("k", i%10), i)
	}
	errs := publishertest.Publish(t, p, batch...)
	delivered := map[string]bool{}
	for _, r := range rcv.Requests() {
		if r.Status == http.StatusNoContent {
			delivered[r.Header.Get("webhook-id")] = true
		}
	}
	var unavailable int
	for i, err := range errs {
		switch {
		case err == nil:
			if !delivered[batch[i].ID.String()] {
				t.Errorf("event %d reported delivered but the endpoint never answered it", i)
			}
		case publisher.IsUnavailable(err):
			unavailable++
		default:
			t.Errorf("event %d: %v, want delivered or unavailable", i, err)
		}
	}
	if unavailable == 0 || len(delivered) == 0 {
		t.Errorf("%d delivered, %d unavailable: want some of each", len(delivered), unavailable)
	}
	if err := p.Ping(context.Background()); err == nil {
		t.Error("Ping succeeded with the endpoint gone")
	}
}

func TestPingCountsAnyAnswerAsUp(t *testing.T) {
	t.Parallel()
	rcv := webhooktest.Start(t, webhooktest.Respond(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable) // up, but refusing this path
	}))
	p := openPublisher(t, signedURL(t, rcv, "/hooks/{event_type}", "&query=code=abc"))
	if err := p.Ping(context.Background()); err != nil {
		t.Fatalf("Ping of an endpoint answering 503: %v", err)
	}
	r := rcv.Requests()[0]
	if r.Method != http.MethodHead || r.Path != "/hooks/" || r.RawQuery != "code=abc" {
		t.Errorf("health check %s %s?%s, want HEAD /hooks/?code=abc", r.Method, r.Path, r.RawQuery)
	}
	// Publish agrees: a 503 is the event's to retry, not the endpoint down.
	errs := publishertest.Publish(t, p, newEvent("a", "", 0))
	if errs[0] == nil || publisher.IsUnavailable(errs[0]) {
		t.Errorf("publish answered 503: %v, want retryable", errs[0])
	}
}

func TestErrorsNameOnlyTheOrigin(t *testing.T) {
	t.Parallel()
	const token = "Zq9PathToken"
	rcv := webhooktest.Start(t, webhooktest.Respond(webhooktest.Hang))
	raw := strings.Replace(signedURL(t, rcv, "/hooks/"+token+"/{event_type}", "&timeout=200ms&query=code="+token),
		"http://", "http://relay:"+token+"@", 1)
	p := openPublisher(t, raw)
	var errs []error
	errs = append(errs, publishertest.Publish(t, p, newEvent("a", "", 0))...)
	rcv.Stop()
	errs = append(errs, publishertest.Publish(t, p, newEvent("a", "", 0))...)
	errs = append(errs, p.Ping(context.Background()))
	for _, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "http://"+rcv.Addr()) {
			t.Errorf("error %v does not name the endpoint", err)
		}
		if err != nil && strings.Contains(err.Error(), token) {
			t.Errorf("error %q reveals the URL's path, query or password", err)
		}
	}
}

func TestCloseIsFinal(t *testing.T) {
	t.Parallel()
	rcv := webhooktest.Start(t)
	p, err := publisher.Open(context.Background(), signedURL(t, rcv, "/", ""))
	if err != nil {
		t.Fatal(err)
	}
	publishertest.RequireDelivered(t, publishertest.Publish(t, p, newEvent("a", "", 0)))
	_ = p.Close(context.Background())
	if errs := publishertest.Publish(t, p, newEvent("a", "", 1)); !publisher.IsUnavailable(errs[0]) {
		t.Errorf("Publish after Close: %v, want unavailable", errs[0])
	}
	if err := p.Ping(context.Background()); err == nil {
		t.Error("Ping after Close succeeded")
	}
}

func TestOpenGivesZeroFieldsTheirDefaults(t *testing.T) {
	t.Parallel()
	rcv := webhooktest.Start(t)
	u, err := url.Parse(rcv.URL(""))
	if err != nil {
		t.Fatal(err)
	}
	p, err := webhook.Open(context.Background(), webhook.Config{Scheme: "http", Host: u.Host, Unsigned: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Close(context.Background()) }()
	publishertest.RequireDelivered(t, publishertest.Publish(t, p, newEvent("a", "", 0)))
	r := rcv.Delivered(t, 1, nil)[0]
	if r.Path != "/" || r.Header.Get("Content-Type") != webhook.ContentTypeDefault {
		t.Errorf("hand-built Config: request to %q with Content-Type %q", r.Path, r.Header.Get("Content-Type"))
	}
}
