package console_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"github.com/outbox-relay/relay/internal/console"
	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher/null"
	"github.com/outbox-relay/relay/pkg/relay"
	"github.com/outbox-relay/relay/pkg/storage"
)

// screenshotsEnv names a directory to write the browser test's screenshots
// to; docs/console.md shows the ones in docs/console:
//
//	CONSOLE_SCREENSHOTS=$PWD/docs/console go test -run TestBrowser ./internal/console/
const screenshotsEnv = "CONSOLE_SCREENSHOTS"

// chromiumPath finds the headless browser `make test` installs
// (scripts/services.sh chromium).
func chromiumPath(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no chromium on PATH: run scripts/services.sh chromium (make test does)")
	return ""
}

// consoleInBrowser serves a console on store and starts a headless
// chromium width pixels wide; the returned context drives it for at most
// two minutes. Both end with the test.
func consoleInBrowser(t *testing.T, chromium string, store storage.Storage, width int) (*httptest.Server, context.Context) {
	t.Helper()
	c, err := console.New(store, console.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(width, 900))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	browser, cancelBrowser := chromedp.NewContext(allocCtx)
	t.Cleanup(cancelBrowser)
	// The first run starts the browser, which lives as long as its context:
	// no timeout on that one.
	if err := chromedp.Do(browser, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	bctx, cancelTimeout := context.WithTimeout(browser, 2*time.Minute)
	t.Cleanup(cancelTimeout)
	return srv, bctx
}

// TestBrowser drives the console in a real headless Chromium, as an
// operator would: the overview, the DEAD events, one of them, its retry,
// and its delivery by a relay running on the same table.
func TestBrowser(t *testing.T) {
	t.Parallel()
	chromium := chromiumPath(t)
	tb := pgtest.New(t)
	store := tb.Store

	// A relay on the table, publishing to a broker that takes everything.
	engine, err := relay.New(relay.Config{RelayID: "relay-browser-test", PollInterval: 50 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)}, store, null.Publisher{})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stopRelay := context.WithCancel(context.Background())
	relayDone := make(chan struct{})
	go func() { engine.Run(runCtx); close(relayDone) }()
	t.Cleanup(func() { stopRelay(); <-relayDone })

	// An hour of history, some scheduled backlog, and DEAD events.
	for i, typ := range []string{"orders.created", "orders.paid", "invoices.issued", "shipments.sent"} {
		emit(t, store, storage.EmitParams{Type: typ, Count: 60 * (4 - i), Payload: []byte(`{"order":1}`)})
	}
	eventually.True(t, time.Minute, func() bool { return tb.Settled(t) }, func() string { return "the relay delivers the history" })
	tb.Exec(t, `UPDATE {{table}} SET delivered_at = now() - (random() * 3500) * interval '1 second',
		created_at = now() - interval '1 hour' WHERE status = 'DELIVERED'`)
	emit(t, store, storage.EmitParams{Type: "orders.created", Count: 25, AvailableIn: time.Hour})
	emit(t, store, storage.EmitParams{Type: "invoices.issued", Count: 8, AvailableIn: time.Hour})
	dead := emit(t, store, storage.EmitParams{Type: "payments.captured", PartitionKey: "customer-42", Count: 3, AvailableIn: time.Hour,
		Payload: []byte(`{"payment_id":"pay_9f2","amount":{"value":"129.90","currency":"EUR"},"note":"<b>not bold</b>"}`),
		Headers: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}})
	tb.Exec(t, `UPDATE {{table}} SET status = 'DEAD', attempts = 10,
		last_error = 'webhook https://payments.internal/hook answered 422: amount currency mismatch',
		updated_at = now() - interval '3 minutes' WHERE event_id = ANY($1)`, dead)

	srv, bctx := consoleInBrowser(t, chromium, store, 1280)
	// Accept the confirmation the retry form asks for, and count it.
	dialogs := make(chan string, 4)
	opening := chromedp.Events(bctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range opening {
			if err != nil {
				return
			}
			dialogs <- ev.Message
			go func() {
				_ = chromedp.Do(bctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
					_, err := cdp.Call(ctx, tg, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
					return err
				}))
			}()
		}
	}()
	shots := map[string][]byte{}
	shot := func(name string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			b, err := chromedp.FullScreenshot(100)(ctx, tg)
			shots[name] = b
			return err
		})
	}
	run := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(sel string, into *string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			var err error
			*into, err = chromedp.Text(chromedp.CSS(sel), chromedp.NodeVisible)(ctx, tg)
			return err
		})
	}

	// The overview.
	var pending, deadCount, chart string
	run("open the overview",
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS("#pending")),
		text("#pending", &pending),
		text("#dead", &deadCount),
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			a, err := chromedp.AttributeValue(chromedp.CSS(".chart svg"), "aria-label")(ctx, tg)
			chart = a.Value
			return err
		}),
		shot("overview"))
	if pending != "33" || deadCount != "3" || !strings.HasPrefix(chart, "600 deliveries in the last hour") {
		t.Errorf("overview shows pending %q, dead %q, chart %q; want 33, 3 and 600 deliveries", pending, deadCount, chart)
	}

	// Filter the DEAD events with the form.
	var rows int
	run("filter DEAD events",
		chromedp.Navigate(srv.URL+"/events"),
		chromedp.SetValue(chromedp.CSS(`select[name="status"]`), "DEAD"),
		chromedp.Submit(chromedp.CSS(`form.filters`)),
		chromedp.WaitVisible(chromedp.CSS(`#retry-matching`)),
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			var err error
			rows, err = chromedp.Evaluate[int](`document.querySelectorAll("table.events tbody tr").length`)(ctx, tg)
			return err
		}),
		shot("events"))
	if rows != 3 {
		t.Errorf("the DEAD filter lists %d events, want 3", rows)
	}

	// Open the newest and retry it.
	target := dead[len(dead)-1]
	var status, payload string
	run("open a DEAD event",
		chromedp.Click(chromedp.CSS(`table.events tbody tr:first-child a.mono`)),
		chromedp.WaitVisible(chromedp.CSS(`#payload`)),
		text(`#status`, &status),
		text(`#payload`, &payload),
		shot("event"))
	if status != "DEAD" || !strings.Contains(payload, `"note": "<b>not bold</b>"`) {
		t.Errorf("event page shows status %q and payload %q", status, payload)
	}
	var flash string
	run("retry it",
		chromedp.Click(chromedp.CSS(`#retry`)),
		chromedp.WaitVisible(chromedp.CSS(`.flash`)),
		text(`.flash`, &flash))
	if !strings.Contains(flash, "went back to PENDING") {
		t.Errorf("after retry the page says %q", flash)
	}
	select {
	case msg := <-dialogs:
		if !strings.Contains(msg, "back to PENDING") {
			t.Errorf("the confirmation asked %q", msg)
		}
	default:
		t.Error("the retry asked for no confirmation")
	}

	// The relay delivers it; the page shows so on reload.
	eventually.True(t, 30*time.Second, func() bool {
		_ = chromedp.Do(bctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`#status`)), text(`#status`, &status))
		return status == string(outbox.StatusDelivered)
	}, func() string { return fmt.Sprintf("event %s shown as %s, want DELIVERED", target, status) })
	run("see it delivered", shot("event-delivered"))

	// The overview on a phone.
	run("overview on a phone",
		chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile),
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS("#pending")),
		shot("overview-phone"))

	if dir := os.Getenv(screenshotsEnv); dir != "" {
		for name, b := range shots {
			if err := os.WriteFile(filepath.Join(dir, name+".png"), b, 0o644); err != nil {
				t.Error(err)
			}
		}
	}
}

func emit(t *testing.T, s storage.Admin, p storage.EmitParams) []uuid.UUID {
	t.Helper()
	ids, err := s.Emit(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// longError is what the webhook publisher stores for an endpoint that
// refuses an event with a JSON body: about 300 characters.
const longError = `webhook: https://payments.internal answered 422 Unprocessable Entity: {"error":"validation_failed","message":"amount.currency \"EUR\" does not match the merchant account's settlement currency \"USD\"","details":[{"field":"amount.currency","code":"mismatch"}],"request_id":"req_7f3a9c2e1b"}`

// hostileError is an error whose text is HTML: it must show as text.
const hostileError = `endpoint said "no": <script>window.__xss=1</script> "><img src=x onerror="window.__xss=2"> & that's final`

// TestBrowserDeadErrors looks at the DEAD events as an operator triaging
// them does, in a real headless Chromium at desktop widths: every row is a
// line or two however long its error, the error column has room, the
// error reads as the text it is (never as markup), its whole text is one
// click away, and the date filters' hints cannot pass for values.
func TestBrowserDeadErrors(t *testing.T) {
	t.Parallel()
	chromium := chromiumPath(t)
	tb := pgtest.New(t)
	store := tb.Store
	long := emit(t, store, storage.EmitParams{Type: "payments.captured", PartitionKey: "customer-42", Count: 3, AvailableIn: time.Hour})
	hostile := emit(t, store, storage.EmitParams{Type: "payments.refunded", Count: 1, AvailableIn: time.Hour})
	tb.Exec(t, `UPDATE {{table}} SET status = 'DEAD', attempts = 10, last_error = $2 WHERE event_id = ANY($1)`, long, longError)
	tb.Exec(t, `UPDATE {{table}} SET status = 'DEAD', attempts = 1, last_error = $2 WHERE event_id = ANY($1)`, hostile, hostileError)

	srv, bctx := consoleInBrowser(t, chromium, store, 1400)
	run := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	type rowBox struct {
		ID       string  `json:"id"`
		Height   float64 `json:"height"`
		ErrWidth float64 `json:"errWidth"`
		Line     float64 `json:"line"`
		Pad      float64 `json:"pad"`
		Text     string  `json:"text"`
		Title    string  `json:"title"`
	}
	type layout struct {
		Rows        []rowBox `json:"rows"`
		Images      int      `json:"images"`
		XSS         bool     `json:"xss"`
		From, To    string
		FromType    string `json:"fromType"`
		ScrollWidth int    `json:"scrollWidth"`
		ClientWidth int    `json:"clientWidth"`
	}
	const measure = `(() => {
		const rows = [...document.querySelectorAll("table.events tbody tr")].map(r => {
			const td = r.querySelector("td.err"), cs = getComputedStyle(td);
			let line = parseFloat(cs.lineHeight);
			if (!(line > 0)) { line = 1.5 * parseFloat(cs.fontSize); }
			const titled = td.querySelector("[title]") || td;
			return {id: r.querySelector("a.mono").textContent, height: r.getBoundingClientRect().height,
				errWidth: td.getBoundingClientRect().width, line: line,
				pad: parseFloat(cs.paddingTop) + parseFloat(cs.paddingBottom),
				text: td.textContent.trim(), title: titled.getAttribute("title") || ""};
		});
		const from = document.querySelector('input[name="from"]'), to = document.querySelector('input[name="to"]');
		return {rows: rows, images: document.querySelectorAll("main img").length, xss: window.__xss !== undefined,
			From: from.placeholder, To: to.placeholder, fromType: from.type,
			scrollWidth: document.documentElement.scrollWidth, clientWidth: document.documentElement.clientWidth};
	})()`
	dateLike := regexp.MustCompile(`\d{4}-\d{2}`)
	for _, width := range []int64{1400, 1920} {
		var got layout
		run(fmt.Sprintf("DEAD events at %d px", width),
			chromedp.EmulateViewport(width, 900),
			chromedp.Navigate(srv.URL+"/events?status=DEAD"),
			chromedp.WaitVisible(chromedp.CSS(`table.events`)),
			chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
				var err error
				got, err = chromedp.Evaluate[layout](measure)(ctx, tg)
				return err
			}))
		if len(got.Rows) != 4 {
			t.Fatalf("at %d px the DEAD filter lists %d events, want 4", width, len(got.Rows))
		}
		for _, r := range got.Rows {
			t.Logf("at %d px the row of %s is %.0f px tall, its error %.0f px wide", width, r.ID, r.Height, r.ErrWidth)
			// Three lines of text, the cell's padding and the border.
			if limit := 3*r.Line + r.Pad + 2; r.Height > limit {
				t.Errorf("at %d px the row of %s is %.0f px tall, want at most %.0f (three lines)", width, r.ID, r.Height, limit)
			}
			if r.ErrWidth < 340 {
				t.Errorf("at %d px the error column is %.0f px wide, want at least 340", width, r.ErrWidth)
			}
			want := longError
			if slices.Contains(hostile, uuid.MustParse(r.ID)) {
				want = hostileError
			}
			// The cell holds the whole error as text (the browser clips
			// it), and its hover says it all too.
			if r.Text != want || r.Title != want {
				t.Errorf("at %d px the error of %s reads\n %q (title %q), want\n %q", width, r.ID, r.Text, r.Title, want)
			}
		}
		if got.Images != 0 || got.XSS {
			t.Errorf("at %d px the hostile error became markup: %d images, script ran: %v", width, got.Images, got.XSS)
		}
		for _, p := range []string{got.From, got.To} {
			if dateLike.MatchString(p) {
				t.Errorf("a date filter's placeholder is %q, which reads as a filled-in date", p)
			}
		}
		if got.ScrollWidth > got.ClientWidth {
			t.Errorf("at %d px the page scrolls sideways: %d px wide in %d", width, got.ScrollWidth, got.ClientWidth)
		}
	}

	// A click on a clipped error shows it whole, in place.
	var heights []float64
	run("expand an error", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		var err error
		heights, err = chromedp.Evaluate[[]float64](`(() => {
			const el = [...document.querySelectorAll("table.events tbody td.err .clip")].find(e => e.scrollHeight > e.clientHeight);
			if (!el) { return [0, 0]; }
			const before = el.getBoundingClientRect().height;
			el.click();
			return [before, el.getBoundingClientRect().height];
		})()`)(ctx, tg)
		return err
	}))
	if len(heights) != 2 || heights[1] <= heights[0] {
		t.Errorf("a click on a clipped error left it %v px tall (before, after), want it taller: whole", heights)
	}

	// The event's page shows the whole error, as text.
	for _, tc := range []struct {
		id   uuid.UUID
		want string
	}{{long[0], longError}, {hostile[0], hostileError}} {
		var shown string
		var xss bool
		run("open "+tc.id.String(),
			chromedp.Navigate(srv.URL+"/events/"+tc.id.String()),
			chromedp.WaitVisible(chromedp.CSS(`dd.err`)),
			chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
				var err error
				if shown, err = chromedp.Evaluate[string](`document.querySelector("dd.err").textContent`)(ctx, tg); err != nil {
					return err
				}
				xss, err = chromedp.Evaluate[bool](`window.__xss !== undefined || document.querySelectorAll("main img").length > 0`)(ctx, tg)
				return err
			}))
		if shown != tc.want || xss {
			t.Errorf("the page of %s shows the error\n %q (markup ran: %v), want\n %q", tc.id, shown, xss, tc.want)
		}
	}
}
