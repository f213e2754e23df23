package console_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/internal/console"
	"github.com/outbox-relay/relay/internal/harness/mysqltest"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/internal/syncbuf"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/storagetest"
)

var ctx = context.Background()

// The handler tests run every page and action against each database the
// console runs on.
func TestPostgres(t *testing.T) { t.Parallel(); runHandlerTests(t, pgtest.Harness{}) }
func TestMariaDB(t *testing.T)  { t.Parallel(); runHandlerTests(t, mysqltest.Harness{}) }

func runHandlerTests(t *testing.T, h storagetest.Harness) {
	for _, tt := range []struct {
		name string
		run  func(t *testing.T, h storagetest.Harness)
	}{
		{"Overview", testOverview},
		{"EventsFilters", testEventsFilters},
		{"EventsPages", testEventsPages},
		{"EventDetail", testEventDetail},
		{"RetryOne", testRetryOne},
		{"RetryMatching", testRetryMatching},
		{"ReadOnly", testReadOnly},
		{"Password", testPassword},
		{"ForeignHost", testForeignHost},
		{"PrunePreview", testPrunePreview},
		{"HostileInput", testHostileInput},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.run(t, h)
		})
	}
}

// fixture is a table with a console in front of it.
type fixture struct {
	tb     storagetest.Table
	srv    *httptest.Server
	client *http.Client
	logs   *syncbuf.Buffer
}

func newFixture(t *testing.T, h storagetest.Harness, cfg console.Config) *fixture {
	t.Helper()
	f := &fixture{tb: h.New(t), logs: &syncbuf.Buffer{}}
	cfg.Logger = slog.New(slog.NewJSONHandler(f.logs, nil))
	c, err := console.New(f.tb.Storage(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.srv = httptest.NewServer(c)
	t.Cleanup(f.srv.Close)
	jar, _ := cookiejar.New(nil)
	f.client = &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return f
}

func (f *fixture) emit(t *testing.T, p storage.EmitParams) []uuid.UUID {
	t.Helper()
	if p.Count == 0 {
		p.Count = 1
	}
	if p.Payload == nil {
		p.Payload = []byte(`{}`)
	}
	ids, err := f.tb.Storage().Emit(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func (f *fixture) kill(t *testing.T, lastError string, ids ...uuid.UUID) {
	t.Helper()
	f.tb.Set(t, storagetest.Change{Status: outbox.StatusDead, LastError: &lastError, Attempts: storagetest.Ptr(5)}, ids...)
}

func (f *fixture) status(t *testing.T, id uuid.UUID) outbox.Status {
	t.Helper()
	r, err := f.tb.Storage().Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return r.Status
}

func (f *fixture) do(t *testing.T, req *http.Request) (int, string, http.Header) {
	t.Helper()
	resp, err := f.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b), resp.Header
}

func (f *fixture) get(t *testing.T, path string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, f.srv.URL+path, nil)
	code, body, _ := f.do(t, req)
	return code, body
}

// post sends form from the console's own pages (Origin is the console's).
func (f *fixture) post(t *testing.T, path string, form url.Values) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", f.srv.URL)
	return f.do(t, req)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// csrf loads path and returns the token of its forms.
func (f *fixture) csrf(t *testing.T, path string) string {
	t.Helper()
	code, body := f.get(t, path)
	m := csrfRE.FindStringSubmatch(body)
	if code != http.StatusOK || m == nil {
		t.Fatalf("GET %s: %d, no CSRF token in the page:\n%s", path, code, body)
	}
	return m[1]
}

func mustContain(t *testing.T, what, body string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(body, p) {
			t.Errorf("%s lacks %q", what, p)
		}
	}
}

func mustNotContain(t *testing.T, what, body string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if strings.Contains(body, p) {
			t.Errorf("%s contains %q", what, p)
		}
	}
}

var idRE = regexp.MustCompile(`href="/events/([0-9a-f-]{36})"`)

// listed returns the event ids a list page links to, in order.
func listed(body string) []uuid.UUID {
	var ids []uuid.UUID
	for _, m := range idRE.FindAllStringSubmatch(body, -1) {
		ids = append(ids, uuid.MustParse(m[1]))
	}
	return ids
}

func testOverview(t *testing.T, h storagetest.Harness) {
	f := newFixture(t, h, console.Config{})
	pending := f.emit(t, storage.EmitParams{Type: "orders.created", Count: 3})
	blocked := f.emit(t, storage.EmitParams{Type: "payments.captured", PartitionKey: "customer-7", Count: 2})
	f.kill(t, "boom", blocked[0])
	f.tb.Set(t, storagetest.Change{Status: outbox.StatusDelivered, DeliveredAt: storagetest.Ago(90 * time.Second)}, pending[0])
	f.tb.Set(t, storagetest.Change{Status: outbox.StatusDelivering, LockedBy: storagetest.Ptr("relay-a"),
		LockedAt: storagetest.Ago(time.Second)}, pending[1])

	code, body := f.get(t, "/")
	if code != http.StatusOK {
		t.Fatalf("GET / = %d:\n%s", code, body)
	}
	mustContain(t, "overview", body,
		`<span class="value" id="pending">2</span>`, // pending[2] and blocked[1]
		`<span class="value" id="dead">1</span>`,
		"orders.created", "payments.captured", // backlog by type
		"relay-a",                         // lease holder
		"customer-7", blocked[0].String(), // the key a DEAD event holds
		"<svg", "<rect", "1 delivered, 1 min ago", // the chart
		`data-refresh="5"`)
}

func testEventsFilters(t *testing.T, h storagetest.Harness) {
	f := newFixture(t, h, console.Config{})
	a := f.emit(t, storage.EmitParams{Type: "a", PartitionKey: "k1", Count: 2})
	b := f.emit(t, storage.EmitParams{Type: "b", PartitionKey: "k2", Count: 2})
	f.kill(t, "Broker Refused it", a[0])
	f.kill(t, "timeout", b[1])

	cases := []struct {
		query string
		want  []uuid.UUID
	}{
		{"", []uuid.UUID{b[1], b[0], a[1], a[0]}},
		{"order=oldest", []uuid.UUID{a[0], a[1], b[0], b[1]}},
		{"status=DEAD", []uuid.UUID{b[1], a[0]}},
		{"status=dead&type=a", []uuid.UUID{a[0]}},
		{"key=k2", []uuid.UUID{b[1], b[0]}},
		{"q=refused", []uuid.UUID{a[0]}},
		{"id=" + b[0].String(), []uuid.UUID{b[0]}},
		{"from=2000-01-01T00:00&to=2000-01-02T00:00", nil},
		{"from=2000-01-01T00:00", []uuid.UUID{b[1], b[0], a[1], a[0]}},
	}
	for _, c := range cases {
		code, body := f.get(t, "/events?"+c.query)
		if code != http.StatusOK {
			t.Errorf("GET /events?%s = %d", c.query, code)
			continue
		}
		if got := listed(body); !slices.Equal(got, c.want) {
			t.Errorf("GET /events?%s lists %v, want %v", c.query, got, c.want)
		}
	}
	for _, bad := range []string{"status=SLEEPING", "id=nope", "from=yesterday", "order=sideways", "after=garbage"} {
		code, body := f.get(t, "/events?"+bad)
		if code != http.StatusBadRequest || !strings.Contains(body, `class="error"`) {
			t.Errorf("GET /events?%s = %d, want 400 with an explanation", bad, code)
		}
	}
	// Only a DEAD filter offers to retry what it selects.
	_, body := f.get(t, "/events?status=DEAD")
	mustContain(t, "DEAD list", body, `action="/events/retry"`)
	_, body = f.get(t, "/events?status=PENDING")
	mustNotContain(t, "PENDING list", body, `action="/events/retry"`)
}

func testEventsPages(t *testing.T, h storagetest.Harness) {
	f := newFixture(t, h, console.Config{PageSize: 3})
	var all []uuid.UUID
	for range 4 { // four statements: created_at and seq both order them
		all = append(all, f.emit(t, storage.EmitParams{Type: "t", Count: 2})...)
	}
	slices.Reverse(all)
	var got []uuid.UUID
	next := "/events"
	for pages := 0; next != ""; pages++ {
		if pages > 5 {
			t.Fatal("the pages never end")
		}
		code, body := f.get(t, next)
		if code != http.StatusOK {
			t.Fatalf("GET %s = %d", next, code)
		}
		got = append(got, listed(body)...)
		next = ""
		if m := regexp.MustCompile(`id="next" href="([^"]+)"`).FindStringSubmatch(body); m != nil {
			next = strings.ReplaceAll(m[1], "&amp;", "&")
			if !strings.Contains(next, "after=") {
				t.Fatalf("next page link %q has no cursor", next)
			}
		}
	}
	if !slices.Equal(got, all) {
		t.Errorf("pages of 3 list %v, want %v", got, all)
	}
}

func testEventDetail(t *testing.T, h storagetest.Harness) {
	f := newFixture(t, h, console.Config{})
	jsonEvent := f.emit(t, storage.EmitParams{Type: "j", PartitionKey: "k&1",
		Payload: []byte(`{"html":"<script>alert(1)</script>","n":1}`), Headers: map[string]string{"trace": "<b>x</b>"}})[0]
	textEvent := f.emit(t, storage.EmitParams{Type: "t", Payload: []byte("plain <i>text</i>")})[0]
	binEvent := f.emit(t, storage.EmitParams{Type: "b", Payload: []byte{0, 1, 2, 0xff}})[0]

	code, body := f.get(t, "/events/"+jsonEvent.String())
	if code != http.StatusOK {
		t.Fatalf("GET event = %d:\n%s", code, body)
	}
	mustContain(t, "JSON event", body, "json, ", "{\n  &#34;html&#34;: &#34;&lt;script&gt;alert(1)&lt;/script&gt;&#34;,\n  &#34;n&#34;: 1\n}", "&lt;b&gt;x&lt;/b&gt;",
		`href="/events?key=k%261"`, "Attempts", "Created", "Available at")
	mustNotContain(t, "JSON event", body, "<script>alert", "<b>x</b>")

	_, body = f.get(t, "/events/"+textEvent.String())
	mustContain(t, "text event", body, "text, ", "plain &lt;i&gt;text&lt;/i&gt;")
	_, body = f.get(t, "/events/"+binEvent.String())
	mustContain(t, "binary event", body, "base64, ", "AAEC/w==")

	if code, _ := f.get(t, "/events/"+uuid.NewString()); code != http.StatusNotFound {
		t.Errorf("unknown event = %d, want 404", code)
	}
	if code, _ := f.get(t, "/events/not-an-id"); code != http.StatusBadRequest {
		t.Errorf("bad id = %d, want 400", code)
	}
}

func testRetryOne(t *testing.T, h storagetest.Harness) {
	f := newFixture(t, h, console.Config{})
	ids := f.emit(t, storage.EmitParams{Type: "t", Count: 2})
	f.kill(t, "boom", ids...)
	path := "/events/" + ids[0].String()
	token := f.csrf(t, path)

	// Without the token, with a wrong one, and from another origin: refused.
	if code, body, _ := f.post(t, path+"/retry", url.Values{}); code != http.StatusForbidden || !strings.Contains(body, "CSRF") {
		t.Errorf("retry without a token = %d, want 403 naming CSRF", code)
	}
	if code, _, _ := f.post(t, path+"/retry", url.Values{"csrf": {strings.Repeat("0", 64)}}); code != http.StatusForbidden {
		t.Errorf("retry with a wrong token = %d, want 403", code)
	}
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+path+"/retry", strings.NewReader(url.Values{"csrf": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://evil.example")
	if code, _, _ := f.do(t, req); code != http.StatusForbidden {
		t.Errorf("retry from another origin = %d, want 403", code)
	}
	// A token from another browser (no cookie) does not count either.
	other := &http.Client{}
	req, _ = http.NewRequest(http.MethodPost, f.srv.URL+path+"/retry", strings.NewReader(url.Values{"csrf": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if resp, err := other.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("retry with a token but no cookie = %v %v, want 403", resp.StatusCode, err)
	}
	if s := f.status(t, ids[0]); s != outbox.StatusDead {
		t.Fatalf("refused retries changed the event to %s", s)
	}

	code, _, hdr := f.post(t, path+"/retry", url.Values{"csrf": {token}})
	if code != http.StatusSeeOther || hdr.Get("Location") != path+"?done=retried" {
		t.Fatalf("retry = %d to %q, want 303 to the event", code, hdr.Get("Location"))
	}
	if s := f.status(t, ids[0]); s != outbox.StatusPending {
		t.Errorf("retried event is %s, want PENDING", s)
	}
	if s := f.status(t, ids[1]); s != outbox.StatusDead {
		t.Errorf("the other DEAD event is %s, want it left DEAD", s)
	}
	_, body := f.get(t, path+"?done=retried")
	mustContain(t, "event after retry", body, "went back to PENDING")
	mustContain(t, "log", f.logs.String(), `"msg":"console: retry dead event"`, ids[0].String(), `"user":"anonymous"`, `"moved":1`)

	// Again: the event is no longer DEAD, so nothing changes.
	code, _, hdr = f.post(t, path+"/retry", url.Values{"csrf": {token}})
	if code != http.StatusSeeOther || !strings.HasSuffix(hdr.Get("Location"), "done=notdead") {
		t.Errorf("second retry = %d to %q, want 303 saying it is not DEAD", code, hdr.Get("Location"))
	}
}

func testRetryMatching(t *testing.T, h storagetest.Harness) {
	f := newFixture(t, h, console.Config{})
	timeouts := f.emit(t, storage.EmitParams{Type: "t", Count: 3})
	refused := f.emit(t, storage.EmitParams{Type: "t", Count: 2})
	f.kill(t, "broker timeout", timeouts...)
	f.kill(t, "refused", refused...)
	token := f.csrf(t, "/events?status=DEAD&q=timeout")

	code, body, _ := f.post(t, "/events/retry", url.Values{"csrf": {token}, "q": {"timeout"}})
	if code != http.StatusOK {
		t.Fatalf("retry matching, unconfirmed = %d:\n%s", code, body)
	}
	mustContain(t, "confirmation", body, "<strong>3</strong> DEAD events match", `name="confirm" value="yes"`)
	for _, id := range timeouts {
		if s := f.status(t, id); s != outbox.StatusDead {
			t.Fatalf("asking for confirmation moved %s to %s", id, s)
		}
	}
	if code, _, _ := f.post(t, "/events/retry", url.Values{"q": {"timeout"}, "confirm": {"yes"}}); code != http.StatusForbidden {
		t.Errorf("confirmed retry without a token = %d, want 403", code)
	}

	code, _, hdr := f.post(t, "/events/retry", url.Values{"csrf": {token}, "q": {"timeout"}, "confirm": {"yes"}})
	if code != http.StatusSeeOther || !strings.Contains(hdr.Get("Location"), "done=retrymany") {
		t.Fatalf("confirmed retry = %d to %q", code, hdr.Get("Location"))
	}
	for _, id := range timeouts {
		if s := f.status(t, id); s != outbox.StatusPending {
			t.Errorf("matching event %s is %s, want PENDING", id, s)
		}
	}
	for _, id := range refused {
		if s := f.status(t, id); s != outbox.StatusDead {
			t.Errorf("event %s outside the filter is %s, want DEAD", id, s)
		}
	}
	mustContain(t, "log", f.logs.String(), `"msg":"console: retry dead events"`, `"moved":3`, `"filter":"q=timeout`)

	_, body, _ = f.post(t, "/events/retry", url.Values{"csrf": {token}, "q": {"nothing like it"}})
	mustContain(t, "empty confirmation", body, "No DEAD event matches")
}

func testReadOnly(t *testing.T, h storagetest.Harness) {
	f := newFixture(t, h, console.Config{ReadOnly: true})
	ids := f.emit(t, storage.EmitParams{Type: "t"})
	f.kill(t, "boom", ids...)
	path := "/events/" + ids[0].String()
	code, body := f.get(t, path)
	if code != http.StatusOK {
		t.Fatal(code)
	}
	mustContain(t, "read-only event page", body, "read-only")
	mustNotContain(t, "read-only event page", body, `action="`+path+`/retry"`)
	_, body = f.get(t, "/events?status=DEAD")
	mustNotContain(t, "read-only DEAD list", body, `action="/events/retry"`)
	// The pages offer no action; a POST made by hand, with this browser's
	// valid token, is refused for being one.
	m := regexp.MustCompile(`name="csrf-token" content="([0-9a-f]+)"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no CSRF token in the page")
	}
	for _, p := range []string{path + "/retry", "/events/retry"} {
		code, body, _ := f.post(t, p, url.Values{"csrf": {m[1]}, "q": {"boom"}, "confirm": {"yes"}})
		if code != http.StatusForbidden || !strings.Contains(body, "this console is read-only") {
			t.Errorf("POST %s on a read-only console = %d, want 403", p, code)
		}
	}
	if s := f.status(t, ids[0]); s != outbox.StatusDead {
		t.Errorf("a read-only console moved the event to %s", s)
	}
}

func testPassword(t *testing.T, h storagetest.Harness) {
	f := newFixture(t, h, console.Config{Password: "s3cret"})
	for _, path := range []string{"/", "/events", "/static/console.css"} {
		code, _ := f.get(t, path)
		if code != http.StatusUnauthorized {
			t.Errorf("GET %s without the password = %d, want 401", path, code)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, f.srv.URL+"/", nil)
	req.SetBasicAuth("ops", "wrong")
	if code, _, _ := f.do(t, req); code != http.StatusUnauthorized {
		t.Errorf("wrong password = %d, want 401", code)
	}
	req.SetBasicAuth("ops", "s3cret")
	if code, body, _ := f.do(t, req); code != http.StatusOK || strings.Contains(body, "s3cret") {
		t.Errorf("basic auth = %d, want 200 and no password in the page", code)
	}
	req, _ = http.NewRequest(http.MethodGet, f.srv.URL+"/events", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	if code, _, _ := f.do(t, req); code != http.StatusOK {
		t.Errorf("bearer token = %d, want 200", code)
	}

	// Who acted is logged by the basic-auth user name.
	ids := f.emit(t, storage.EmitParams{Type: "t"})
	f.kill(t, "boom", ids...)
	req, _ = http.NewRequest(http.MethodGet, f.srv.URL+"/events/"+ids[0].String(), nil)
	req.SetBasicAuth("alice", "s3cret")
	_, body, _ := f.do(t, req)
	token := csrfRE.FindStringSubmatch(body)
	if token == nil {
		t.Fatal("no CSRF token")
	}
	req, _ = http.NewRequest(http.MethodPost, f.srv.URL+"/events/"+ids[0].String()+"/retry",
		strings.NewReader(url.Values{"csrf": {token[1]}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth("alice", "s3cret")
	if code, _, _ := f.do(t, req); code != http.StatusSeeOther {
		t.Fatalf("retry with the password = %d", code)
	}
	mustContain(t, "log", f.logs.String(), `"user":"alice"`)
	mustNotContain(t, "log", f.logs.String(), "s3cret")
}

func testPrunePreview(t *testing.T, h storagetest.Harness) {
	f := newFixture(t, h, console.Config{})
	ids := f.emit(t, storage.EmitParams{Type: "t", Count: 3})
	f.tb.Set(t, storagetest.Change{Status: outbox.StatusDelivered, DeliveredAt: storagetest.Ago(48 * time.Hour)}, ids[0], ids[1])
	code, body := f.get(t, "/prune?status=DELIVERED&older_than=24h")
	if code != http.StatusOK {
		t.Fatalf("prune preview = %d:\n%s", code, body)
	}
	mustContain(t, "prune preview", body, `<strong>2</strong> DELIVERED events are older than 24h`)
	if got := len(f.tb.Rows(t)); got != 3 {
		t.Errorf("a preview deleted rows: %d left, want 3", got)
	}
	if code, _ := f.get(t, "/prune?status=PENDING&older_than=1h"); code != http.StatusBadRequest {
		t.Errorf("prune preview of PENDING = %d, want 400", code)
	}
	// relay-cli prune's syntax: days and weeks too.
	code, body = f.get(t, "/prune?status=DELIVERED&older_than=1d")
	if code != http.StatusOK {
		t.Fatalf("prune preview with older_than=1d = %d:\n%s", code, body)
	}
	mustContain(t, "prune preview in days", body, `<strong>2</strong> DELIVERED events are older than 1d`)
	if code, body = f.get(t, "/prune?status=DELIVERED&older_than=7d"); code != http.StatusOK {
		t.Errorf("prune preview with older_than=7d = %d:\n%s", code, body)
	}
	if code, _ := f.get(t, "/prune?older_than=soon"); code != http.StatusBadRequest {
		t.Errorf("prune preview with a bad age = %d, want 400", code)
	}
}

// A console without a password answers requests addressed to loopback
// names only, so a page whose domain an attacker points at 127.0.0.1 (DNS
// rebinding) cannot read it; with a password, any name is fine.
func testForeignHost(t *testing.T, h storagetest.Harness) {
	open := newFixture(t, h, console.Config{})
	for host, want := range map[string]int{
		"attacker.example":      http.StatusMisdirectedRequest,
		"attacker.example:8090": http.StatusMisdirectedRequest,
		"localhost:8090":        http.StatusOK,
		"127.0.0.1":             http.StatusOK,
		"[::1]:8090":            http.StatusOK,
	} {
		req, _ := http.NewRequest(http.MethodGet, open.srv.URL+"/", nil)
		req.Host = host
		if code, _, _ := open.do(t, req); code != want {
			t.Errorf("GET / for host %s without a password = %d, want %d", host, code, want)
		}
	}
	locked := newFixture(t, h, console.Config{Password: "s3cret"})
	req, _ := http.NewRequest(http.MethodGet, locked.srv.URL+"/", nil)
	req.Host = "console.example:8090"
	req.SetBasicAuth("ops", "s3cret")
	if code, _, _ := locked.do(t, req); code != http.StatusOK {
		t.Errorf("GET / for another host with the password = %d, want 200", code)
	}
}

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8090": true, "[::1]:8090": true, "localhost:8090": true,
		"0.0.0.0:8090": false, ":8090": false, "10.0.0.5:8090": false, "nonsense": false,
	} {
		if got := console.Loopback(addr); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// With CAPTURE=wal the overview shows the replication slot, and says when
// it needs an operator.
func TestOverviewShowsTheWALSlot(t *testing.T) {
	t.Parallel()
	slot := &console.Slot{Name: "outbox_relay_openoutbox_events", WALStatus: "lost", RetainedBytes: 3 << 20}
	f := newFixture(t, pgtest.Harness{}, console.Config{Slot: func(context.Context) (*console.Slot, error) { return slot, nil }})
	code, body := f.get(t, "/")
	if code != http.StatusOK {
		t.Fatalf("GET / = %d:\n%s", code, body)
	}
	mustContain(t, "overview", body, `id="wal-slot"`, "WAL slot outbox_relay_openoutbox_events", "3.0 MiB",
		"no relay streams", "lost: the relay makes it anew")
	f2 := newFixture(t, pgtest.Harness{}, console.Config{Slot: func(context.Context) (*console.Slot, error) { return nil, nil }})
	_, body = f2.get(t, "/")
	mustNotContain(t, "overview without a slot", body, `id="wal-slot"`)
}

// With CAPTURE=binlog the overview shows the reader's saved position, how
// far the server's log is ahead of it, and when no relay streams.
func TestOverviewShowsTheBinlogPosition(t *testing.T) {
	t.Parallel()
	pos := &console.BinlogPosition{Saved: "gtid 0-1-5 (binlog.000001:3283)", Server: "gtid 0-1-9 (binlog.000001:7379)",
		Age: 3 * time.Second, BehindBytes: 4096}
	f := newFixture(t, pgtest.Harness{}, console.Config{Binlog: func(context.Context) (*console.BinlogPosition, error) { return pos, nil }})
	code, body := f.get(t, "/")
	if code != http.StatusOK {
		t.Fatalf("GET / = %d:\n%s", code, body)
	}
	mustContain(t, "overview", body, `id="binlog-position"`, "Binlog position", "4.0 KiB", "saved 3.0s ago",
		"no relay streams", "saved gtid 0-1-5 (binlog.000001:3283)", "server gtid 0-1-9 (binlog.000001:7379)")
	rotated := &console.BinlogPosition{Active: true, Saved: "binlog.000001:4", Server: "binlog.000003:4", BehindFiles: 2}
	f2 := newFixture(t, pgtest.Harness{}, console.Config{Binlog: func(context.Context) (*console.BinlogPosition, error) { return rotated, nil }})
	_, body = f2.get(t, "/")
	mustContain(t, "overview of a rotated log", body, "2 files", "a relay streams")
	mustNotContain(t, "overview of a streaming reader", body, "no relay streams")
	f3 := newFixture(t, pgtest.Harness{}, console.Config{Binlog: func(context.Context) (*console.BinlogPosition, error) { return nil, nil }})
	_, body = f3.get(t, "/")
	mustNotContain(t, "overview without a position", body, `id="binlog-position"`)
}
