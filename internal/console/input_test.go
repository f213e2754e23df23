package console_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/outbox-relay/relay/internal/console"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/storagetest"
)

// hostile are raw (already escaped) values no parameter may carry, and
// what the refusal says of each.
var hostile = []struct{ raw, problem string }{
	{"%00", "contains a NUL byte"},
	{"timeout%00", "contains a NUL byte"},
	{"%ff", "is not valid UTF-8"},
	{"caf%C3", "is not valid UTF-8"}, // a sequence cut short
	{strings.Repeat("x", console.InputMaxLen+1), "is 1001 characters long"},
}

// Every handler that takes input refuses a NUL byte, invalid UTF-8 or an
// overlong value in any of its parameters with 400 naming the parameter,
// before the storage sees it: the path's event id, the query string of
// every page, and the form of every action. Nothing moves, and valid values
// still work.
func testHostileInput(t *testing.T, h storagetest.Harness) {
	f := newFixture(t, h, console.Config{})
	ids := f.emit(t, storage.EmitParams{Type: "t", PartitionKey: "k", Count: 2})
	f.kill(t, "broker timeout", ids...)
	event := "/events/" + ids[0].String()
	token := f.csrf(t, event)

	refused := func(what, name, problem string, code int, body string) {
		t.Helper()
		if code != http.StatusBadRequest {
			t.Errorf("%s = %d, want 400:\n%s", what, code, body)
			return
		}
		want := `<p class="error" role="alert">` + name + ": " + problem
		if !strings.Contains(body, want) {
			t.Errorf("%s: the page lacks %q:\n%s", what, want, body)
		}
	}
	pages := []struct {
		path   string
		params []string
	}{
		{"/", []string{"done"}},
		{"/events", []string{"status", "type", "key", "id", "q", "from", "to", "order", "after", "done"}},
		{event, []string{"done"}},
		{"/prune", []string{"status", "older_than"}},
	}
	for _, p := range pages {
		for _, name := range p.params {
			for _, v := range hostile {
				path := p.path + "?" + name + "=" + v.raw
				code, body := f.get(t, path)
				refused("GET "+path[:min(len(path), 60)], name, v.problem, code, body)
			}
		}
	}
	// A valid form for each action; each field in turn is made hostile,
	// in the body and in the query string.
	actions := []struct {
		path string
		form url.Values
	}{
		{event + "/retry", url.Values{"csrf": {token}}},
		{"/events/retry", url.Values{"csrf": {token}, "status": {"DEAD"}, "type": {"t"}, "key": {"k"},
			"id": {ids[1].String()}, "q": {"timeout"}, "from": {"2000-01-01"}, "to": {"2100-01-01"}, "confirm": {"yes"}}},
	}
	for _, a := range actions {
		for name := range a.form {
			for _, v := range hostile {
				form := url.Values{}
				for k, vs := range a.form {
					if k != name {
						form[k] = vs
					}
				}
				body := form.Encode() + "&" + name + "=" + v.raw
				req, _ := http.NewRequest(http.MethodPost, f.srv.URL+a.path, strings.NewReader(body))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				req.Header.Set("Origin", f.srv.URL)
				code, page, _ := f.do(t, req)
				refused("POST "+a.path+" with "+name+"="+v.raw[:min(len(v.raw), 20)], name, v.problem, code, page)

				req, _ = http.NewRequest(http.MethodPost, f.srv.URL+a.path+"?"+name+"="+v.raw, strings.NewReader(a.form.Encode()))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				req.Header.Set("Origin", f.srv.URL)
				code, page, _ = f.do(t, req)
				refused("POST "+a.path+"?"+name+"="+v.raw[:min(len(v.raw), 20)], name, v.problem, code, page)
			}
		}
	}
	// The event id in the path, for the page and its action.
	for _, v := range hostile {
		code, body := f.get(t, "/events/"+v.raw)
		refused("GET /events/"+v.raw[:min(len(v.raw), 20)], "id", v.problem, code, body)
		code, body, _ = f.post(t, "/events/"+v.raw+"/retry", url.Values{"csrf": {token}})
		refused("POST /events/"+v.raw[:min(len(v.raw), 20)]+"/retry", "id", v.problem, code, body)
	}
	// A hostile parameter's name is refused too, and shown quoted.
	code, body := f.get(t, "/events?ty%00pe=t")
	refused("GET /events?ty%00pe=t", `parameter &#34;ty\x00pe&#34;`, "its name contains a NUL byte", code, body)

	// Raw bytes, not escaped, as a client other than a browser may send
	// them (Go's server itself refuses a raw NUL).
	for _, raw := range []struct{ path, param string }{{"/events?type=\xff", "type"}, {"/events/\xff", "id"}} {
		conn, err := net.Dial("tcp", f.srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(conn, "GET "+raw.path+" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		conn.Close()
		refused(fmt.Sprintf("GET %q", raw.path), raw.param, "is not valid UTF-8", resp.StatusCode, string(b))
	}
	// A query string that cannot be read, and a form too large to read.
	code, body = f.get(t, "/events?q=%zz")
	refused("GET /events?q=%zz", "query string", `cannot be read: invalid URL escape &#34;%zz&#34;`, code, body)
	code, body, _ = f.post(t, "/events/retry", url.Values{"csrf": {token}, "q": {strings.Repeat("x", 100<<10)}})
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(body, "form: is larger than 64 KiB") {
		t.Errorf("POST /events/retry with a 100 KiB form = %d, want 413 naming the form:\n%s", code, body)
	}

	for _, id := range ids {
		if s := f.status(t, id); s != outbox.StatusDead {
			t.Errorf("a refused request moved %s to %s", id, s)
		}
	}
	logs := f.logs.String()
	mustNotContain(t, "log", logs, `"msg":"console: retry dead event`)
	mustContain(t, "log", logs, `"msg":"console: refused input"`, `"param":"older_than"`, `"problem":"contains a NUL byte"`)

	// Valid values, also unusual ones, still work.
	long := strings.Repeat("é", console.InputMaxLen)
	for query, want := range map[string]int{
		"type=t&key=k&q=TIMEOUT&status=dead": 2,
		"type=t%C3%A9%E2%82%AC%F0%9F%93%A6":  0, // é € 📦
		"q=" + long:                          0,
		"key=" + url.QueryEscape("k\t\x01"):  0, // control characters other than NUL are text
	} {
		code, body := f.get(t, "/events?"+query)
		if code != http.StatusOK {
			t.Errorf("GET /events?%s = %d, want 200:\n%s", query[:min(len(query), 60)], code, body)
		} else if got := len(listed(body)); got != want {
			t.Errorf("GET /events?%s lists %d events, want %d", query[:min(len(query), 60)], got, want)
		}
	}
	code, body, _ = f.post(t, "/events/retry", url.Values{"csrf": {token}, "q": {"timeout"}, "key": {"k"}, "type": {"t"}})
	if code != http.StatusOK {
		t.Fatalf("retry matching, unconfirmed = %d:\n%s", code, body)
	}
	mustContain(t, "confirmation", body, "<strong>2</strong> DEAD events match")
}
