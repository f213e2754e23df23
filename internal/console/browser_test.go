package console_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
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

	c, err := console.New(store, console.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1280, 900))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	browser, cancelBrowser := chromedp.NewContext(allocCtx)
	defer cancelBrowser()
	// The first run starts the browser, which lives as long as its context:
	// no timeout on that one.
	if err := chromedp.Do(browser, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	bctx, cancelTimeout := context.WithTimeout(browser, 2*time.Minute)
	defer cancelTimeout()
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
