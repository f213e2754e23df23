// Package console is the outbox's web console: an overview of the table, a
// searchable list of events, one event in full, and the operator's actions
// on DEAD events (retry one, retry those a filter selects) and a prune
// preview. It reaches the table only through storage.Admin, the interface
// relay-cli uses, so every action keeps the same guards and wakes relays the
// same way. Pages are html/template renderings of embedded files, readable
// without JavaScript; the chart is SVG drawn here.
package console

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"time"

	"github.com/outbox-relay/relay/internal/fieldcheck"
	"github.com/outbox-relay/relay/pkg/storage"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// RefreshDefault is how often the overview reloads itself when
// Config.Refresh is zero.
const RefreshDefault = 5 * time.Second

// PageSizeDefault is how many events one page of the list shows when
// Config.PageSize is zero.
const PageSizeDefault = 50

// RetryMatchingMax bounds the DEAD events one "retry all matching" action
// moves; an operator repeats it for more.
const RetryMatchingMax = 10000

// Config is how a console behaves. A zero Config is a console on a
// trusted (loopback) address that allows actions.
type Config struct {
	// ReadOnly refuses every action that changes rows.
	ReadOnly bool
	// Password, when set, is required from every request: as the password
	// of HTTP basic authentication (any user name, which is logged as who
	// acted) or as a bearer token.
	Password string
	// Refresh is how often the overview reloads; 0 means RefreshDefault.
	Refresh time.Duration
	// PageSize is how many events a page lists; 0 means PageSizeDefault.
	PageSize int
	// Logger receives one line per action (who, what, how many); nil
	// means slog.Default().
	Logger *slog.Logger
	// Slot reads the table's CAPTURE=wal replication slot for the
	// overview (nil, or a nil *Slot: no slot to show).
	Slot func(ctx context.Context) (*Slot, error)
	// Binlog reads the table's CAPTURE=binlog position for the overview
	// (nil, or a nil *BinlogPosition: no position to show).
	Binlog func(ctx context.Context) (*BinlogPosition, error)
}

// BinlogPosition is a CAPTURE=binlog reader's saved position as the
// overview shows it.
type BinlogPosition struct {
	// Active is true while a relay streams (holds the reader's lock).
	Active bool
	// Saved is the saved position and Server the end of the server's
	// log, as the binlog package prints them ("" when unreadable).
	Saved, Server string
	// Age is how long ago the position was saved.
	Age time.Duration
	// BehindBytes is the log between Saved and Server in one file;
	// BehindFiles how many files Saved is behind (-1: unknown).
	BehindBytes int64
	BehindFiles int
}

// Trouble is what an operator should look at, or "".
func (b BinlogPosition) Trouble() string {
	if !b.Active {
		return "no relay streams: the claims deliver the events, later"
	}
	return ""
}

// Slot is a CAPTURE=wal replication slot as the overview shows it.
type Slot struct {
	Name string
	// Active is true while a relay streams from it.
	Active bool
	// WALStatus is the server's word: reserved, extended, unreserved or
	// lost.
	WALStatus string
	// RetainedBytes is the WAL the slot keeps from removal.
	RetainedBytes int64
}

// Trouble is what an operator should look at, or "".
func (s Slot) Trouble() string {
	switch {
	case s.WALStatus == "lost":
		return "lost: the relay makes it anew and claims the events from the table"
	case s.WALStatus == "unreserved":
		return "about to be lost: it keeps more WAL than max_slot_wal_keep_size allows"
	case !s.Active:
		return "no relay streams from it: it keeps WAL until one does"
	}
	return ""
}

// Validate reports every field that cannot work, by its Go name. Zero
// fields are valid: they take their defaults.
func (c Config) Validate() error {
	v := fieldcheck.Check("console")
	v.Expect("Refresh", c.Refresh >= 0, "must not be negative, got %s", c.Refresh)
	v.Expect("Refresh", c.Refresh <= 0 || c.Refresh >= time.Second, "must be at least 1s, got %s", c.Refresh)
	v.Expect("PageSize", c.PageSize >= 0 && c.PageSize <= 1000, "must be 0 to 1000, got %d", c.PageSize)
	return v.Err()
}

func (c Config) withDefaults() Config {
	fieldcheck.Default(&c.Refresh, RefreshDefault)
	fieldcheck.Default(&c.PageSize, PageSizeDefault)
	return c
}

// Console serves the pages. It is an http.Handler.
type Console struct {
	admin   storage.Admin
	cfg     Config
	log     *slog.Logger
	pages   map[string]*template.Template
	csrfKey []byte
	mux     *http.ServeMux
}

// New returns a console on admin.
func New(admin storage.Admin, cfg Config) (*Console, error) {
	if admin == nil {
		return nil, errors.New("console: no storage")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	c := &Console{admin: admin, cfg: cfg, log: cfg.Logger, csrfKey: make([]byte, 32)}
	if c.log == nil {
		c.log = slog.Default()
	}
	if _, err := rand.Read(c.csrfKey); err != nil {
		return nil, fmt.Errorf("console: csrf key: %w", err)
	}
	var err error
	if c.pages, err = parsePages(); err != nil {
		return nil, err
	}
	static, _ := fs.Sub(staticFiles, "static")
	// Every route goes through handle, which refuses input the storage
	// could not take before a handler sees it.
	c.mux = http.NewServeMux()
	c.handle("GET /{$}", http.HandlerFunc(c.overview))
	c.handle("GET /events", http.HandlerFunc(c.events))
	c.handle("GET /events/{id}", http.HandlerFunc(c.event))
	c.handle("POST /events/{id}/retry", http.HandlerFunc(c.retryOne))
	c.handle("POST /events/retry", http.HandlerFunc(c.retryMatching))
	c.handle("GET /prune", http.HandlerFunc(c.prunePreview))
	c.handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	return c, nil
}

// ServeHTTP checks the password, sets the headers every page carries and
// serves the page.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	// Nothing here is meant to be framed, sniffed or cached, and no page
	// loads anything from elsewhere.
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	if c.cfg.Password == "" && !Loopback(hostPort(r.Host)) {
		// Without a password the console listens on loopback only, and
		// answers only requests addressed to a loopback name: a web page
		// whose own domain an attacker points at 127.0.0.1 (DNS
		// rebinding) would otherwise be same-origin with it.
		http.Error(w, "this console answers requests for localhost or a loopback address only; set a password to reach it by another name", http.StatusMisdirectedRequest)
		return
	}
	if !c.authorized(r) {
		h.Set("WWW-Authenticate", `Basic realm="relay console", charset="UTF-8"`)
		http.Error(w, "a password is required: log in with the console's password", http.StatusUnauthorized)
		return
	}
	c.mux.ServeHTTP(w, r)
}

// randomHex returns n random bytes as hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
