package console_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/internal/console"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/internal/logfmt"
	"github.com/outbox-relay/relay/internal/syncbuf"
	"github.com/outbox-relay/relay/pkg/storage"
)

// failing is the real storage with every read and action failing, as on
// a database that went away.
type failing struct{ storage.Admin }

const gone = "server closed the connection unexpectedly"

var errGone = errors.New(gone)

func (failing) Stats(context.Context, storage.StatsParams) (storage.Stats, error) {
	return storage.Stats{}, errGone
}
func (failing) List(context.Context, storage.ListParams) ([]storage.Row, error) { return nil, errGone }
func (failing) Get(context.Context, uuid.UUID) (storage.Row, error)             { return storage.Row{}, errGone }
func (failing) Prune(context.Context, storage.PruneParams) (storage.PruneResult, error) {
	return storage.PruneResult{}, errGone
}
func (failing) RetryDead(context.Context, storage.RetryDeadParams) (int64, error) { return 0, errGone }

// A storage error that reaches a handler answers 500 saying what failed,
// and is logged: what failed, the error, the request's method and path
// (never its query or credentials), who asked and from where.
func TestServerErrorsAreLogged(t *testing.T) {
	t.Parallel()
	tb := pgtest.Harness{}.New(t)
	logs := &syncbuf.Buffer{}
	c, err := console.New(failing{tb.Storage()}, console.Config{Password: "s3cret",
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{ReplaceAttr: logfmt.ReplaceAttr}))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c)
	defer srv.Close()
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	send := func(method, path string, form url.Values) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.SetBasicAuth("alice", "s3cret")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// The error page carries the token for the actions.
	_, body := send(http.MethodGet, "/events?status=DEAD&q=secret-filter", nil)
	m := regexp.MustCompile(`name="csrf-token" content="([0-9a-f]+)"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF token in the error page:\n%s", body)
	}
	id := uuid.NewString()
	for _, tt := range []struct {
		method, path, what string
		form               url.Values
	}{
		{"GET", "/", "read stats", nil},
		{"GET", "/events?status=DEAD&q=secret-filter", "list events", nil},
		{"GET", "/events/" + id, "read event", nil},
		{"GET", "/prune?status=DEAD&older_than=1d", "count prunable events", nil},
		{"POST", "/events/" + id + "/retry", "retry event", url.Values{"csrf": {m[1]}}},
		{"POST", "/events/retry", "count dead events", url.Values{"csrf": {m[1]}, "q": {"x"}}},
		{"POST", "/events/retry", "retry events", url.Values{"csrf": {m[1]}, "q": {"x"}, "confirm": {"yes"}}},
	} {
		before := len(logs.String())
		code, body := send(tt.method, tt.path, tt.form)
		if code != http.StatusInternalServerError {
			t.Errorf("%s %s on a failing storage = %d, want 500:\n%s", tt.method, tt.path, code, body)
			continue
		}
		mustContain(t, tt.method+" "+tt.path, body, `class="error"`, tt.what+": "+gone)
		line := logs.String()[before:]
		path, _, _ := strings.Cut(tt.path, "?")
		mustContain(t, "the log of "+tt.method+" "+tt.path, line, `"level":"ERROR"`, `"msg":"console: `+tt.what+`"`,
			`"error":"`+gone+`"`, `"method":"`+tt.method+`"`, `"path":"`+path+`"`, `"user":"alice"`, `"remote":"127.0.0.1"`)
	}
	mustNotContain(t, "log", logs.String(), "s3cret", "secret-filter", m[1])
}

// An overview card that cannot be read says why on the page, and in the
// log.
func TestOverviewCardErrorsAreLogged(t *testing.T) {
	t.Parallel()
	f := newFixture(t, pgtest.Harness{}, console.Config{
		Slot:   func(context.Context) (*console.Slot, error) { return nil, errors.New("slot: " + gone) },
		Binlog: func(context.Context) (*console.BinlogPosition, error) { return nil, errors.New("binlog: " + gone) },
	})
	code, body := f.get(t, "/")
	if code != http.StatusOK {
		t.Fatalf("GET / = %d:\n%s", code, body)
	}
	mustContain(t, "overview", body, "slot: "+gone, "binlog: "+gone)
	mustContain(t, "log", f.logs.String(), `"msg":"console: read wal slot"`, `"error":"slot: `+gone,
		`"msg":"console: read binlog position"`, `"error":"binlog: `+gone)
}
