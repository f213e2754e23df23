package console

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/internal/bytesize"
	"github.com/outbox-relay/relay/internal/duration"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
)

// page is what every template gets.
type page struct {
	Title    string
	Nav      string
	ReadOnly bool
	CSRF     string
	Refresh  int  // seconds; 0: the page does not reload itself
	Wide     bool // the page's table takes the window's width
	Flash    string
	Error    string
	Data     any
}

func parsePages() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"age":    age,
		"stamp":  stamp,
		"stamps": stampSeconds,
		"stampp": func(t *time.Time) string { return stampOrDash(t) },
		"deref":  func(s *string) string { return derefOr(s, "") },
		"num":    func(n int64) string { return strconv.FormatInt(n, 10) },
		"bytes":  bytesize.Format,
		"behind": func(b BinlogPosition) string {
			switch {
			case b.Server == "":
				return "?"
			case b.BehindFiles < 0:
				return "another file"
			case b.BehindFiles == 1:
				return "1 file"
			case b.BehindFiles > 1:
				return strconv.Itoa(b.BehindFiles) + " files"
			}
			return bytesize.Format(b.BehindBytes)
		},
		"shortid": func(id uuid.UUID) string { return id.String()[:8] },
	}
	pages := map[string]*template.Template{}
	for _, name := range []string{"overview", "events", "event", "confirm", "prune", "error"} {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFiles, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}

func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	p.ReadOnly = c.cfg.ReadOnly
	p.CSRF = c.csrfToken(w, r)
	if p.Flash == "" {
		p.Flash = flashes[r.URL.Query().Get("done")]
	}
	var buf bytes.Buffer
	if err := c.pages[name].Execute(&buf, p); err != nil {
		c.log.Error("console: render page", "page", name, "error", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w)
}

// fail renders an error page; a storage error says what failed without
// anything from the storage URL (drivers keep secrets out of errors).
func (c *Console) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	c.render(w, r, status, "error", page{Title: http.StatusText(status), Error: msg})
}

// serverError answers 500 for an error of the storage's, saying what
// failed, and logs it with who asked and the request's path (not its query
// string, which holds the filters, nor its credentials).
func (c *Console) serverError(w http.ResponseWriter, r *http.Request, what string, err error) {
	user, addr := actor(r)
	c.log.Error("console: "+what, "error", err, "method", r.Method, "path", r.URL.Path, "user", user, "remote", addr)
	c.fail(w, r, http.StatusInternalServerError, what+": "+err.Error())
}

var flashes = map[string]string{
	"retried":   "Retried: the event went back to PENDING, due now, for a relay to deliver.",
	"notdead":   "Nothing changed: the event is not DEAD (any more).",
	"retrymany": "The selected DEAD events are PENDING again.",
}

// ---- Overview ---------------------------------------------------------------

type overviewData struct {
	Stats storage.Stats
	Rate  chart
	// Slot is the CAPTURE=wal slot, nil when there is none; SlotErr says
	// why it could not be read.
	Slot    *Slot
	SlotErr string
	// Binlog is the CAPTURE=binlog position, nil when none is saved;
	// BinlogErr says why it could not be read.
	Binlog    *BinlogPosition
	BinlogErr string
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	// The overview reloads every few seconds: the delivered history is
	// estimated, not counted (seconds on a table of millions of rows).
	st, err := c.admin.Stats(ctx, storage.StatsParams{EstimateDelivered: true})
	if err != nil {
		c.serverError(w, r, "read stats", err)
		return
	}
	rate, err := c.admin.DeliveryRate(ctx)
	if err != nil {
		c.serverError(w, r, "read delivery rate", err)
		return
	}
	data := overviewData{Stats: st, Rate: newChart(rate)}
	// The slot and the binlog position are a card each: the page shows
	// why one could not be read, and the log keeps it.
	if c.cfg.Slot != nil {
		if data.Slot, err = c.cfg.Slot(ctx); err != nil {
			data.SlotErr = err.Error()
			c.log.Warn("console: read wal slot", "error", err, "method", r.Method, "path", r.URL.Path)
		}
	}
	if c.cfg.Binlog != nil {
		if data.Binlog, err = c.cfg.Binlog(ctx); err != nil {
			data.BinlogErr = err.Error()
			c.log.Warn("console: read binlog position", "error", err, "method", r.Method, "path", r.URL.Path)
		}
	}
	c.render(w, r, http.StatusOK, "overview", page{Title: "Overview", Nav: "overview",
		Refresh: int(c.cfg.Refresh / time.Second), Data: data})
}

// chart is the delivery-rate bar chart, laid out for an SVG.
type chart struct {
	Bars            []bar
	Max, Total      int64
	Width, Height   int
	LastMinute      int64
	PerSecondRecent string
	Until           time.Time
}

type bar struct {
	X, Y, W, H int
	Count      int64
	MinutesAgo int
}

func newChart(r storage.DeliveryRate) chart {
	ch := chart{Width: 600, Height: 120, Until: r.Until}
	for _, n := range r.PerMinute {
		ch.Max = max(ch.Max, n)
		ch.Total += n
	}
	if len(r.PerMinute) > 0 {
		ch.LastMinute = r.PerMinute[len(r.PerMinute)-1]
	}
	ch.PerSecondRecent = strconv.FormatFloat(float64(ch.LastMinute)/60, 'f', 1, 64)
	step := ch.Width / max(len(r.PerMinute), 1)
	for i, n := range r.PerMinute {
		h := 0
		if ch.Max > 0 {
			h = int(n * int64(ch.Height) / ch.Max)
		}
		if n > 0 && h == 0 {
			h = 1
		}
		ch.Bars = append(ch.Bars, bar{X: i * step, Y: ch.Height - h, W: step - 1, H: h, Count: n,
			MinutesAgo: len(r.PerMinute) - 1 - i})
	}
	return ch
}

// ---- Events -----------------------------------------------------------------

// filter is the list's query string, parsed.
type filter struct {
	Status, Type, Key, ID, Q, From, To, Order string
	After                                     string
}

func (f filter) values() url.Values {
	v := url.Values{}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	set("status", f.Status)
	set("type", f.Type)
	set("key", f.Key)
	set("id", f.ID)
	set("q", f.Q)
	set("from", f.From)
	set("to", f.To)
	set("order", f.Order)
	return v
}

// Query is the filter as a query string, without the cursor, for an href
// (url.Values.Encode escapes it).
func (f filter) Query() template.URL { return template.URL(f.values().Encode()) }

// Set reports whether any filter narrows the list.
func (f filter) Set() bool {
	return f.Status != "" || f.Type != "" || f.Key != "" || f.ID != "" || f.Q != "" || f.From != "" || f.To != ""
}

func readFilter(v url.Values) filter {
	g := func(k string) string { return strings.TrimSpace(v.Get(k)) }
	return filter{Status: strings.ToUpper(g("status")), Type: g("type"), Key: g("key"), ID: g("id"), Q: g("q"),
		From: g("from"), To: g("to"), Order: g("order"), After: g("after")}
}

// params turns the filter into List's parameters, or says what is wrong.
func (f filter) params(limit int) (storage.ListParams, error) {
	p := storage.ListParams{Status: outbox.Status(f.Status), EventType: f.Type, PartitionKey: f.Key,
		ErrorContains: f.Q, Limit: limit, OldestFirst: f.Order == "oldest"}
	if p.Status != "" && !p.Status.Valid() {
		return p, fmt.Errorf("unknown status %q: use PENDING, DELIVERING, DELIVERED or DEAD", f.Status)
	}
	if f.Order != "" && f.Order != "oldest" && f.Order != "newest" {
		return p, fmt.Errorf("order must be newest or oldest, not %q", f.Order)
	}
	if f.ID != "" {
		id, err := uuid.Parse(f.ID)
		if err != nil {
			return p, fmt.Errorf("event id %q is not a UUID", f.ID)
		}
		p.EventID = id
	}
	var err error
	if p.CreatedFrom, err = parseTime(f.From); err != nil {
		return p, fmt.Errorf("from: %w", err)
	}
	if p.CreatedBefore, err = parseTime(f.To); err != nil {
		return p, fmt.Errorf("to: %w", err)
	}
	if f.After != "" {
		cur, err := storage.ParseListCursor(f.After)
		if err != nil {
			return p, errors.New("the page cursor is damaged: start from the first page")
		}
		p.After = &cur
	}
	return p, nil
}

// parseTime reads a time as a datetime-local input sends it (UTC) or as
// RFC 3339.
func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02 15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not a time: use YYYY-MM-DDTHH:MM (UTC) or RFC 3339", s)
}

type eventsData struct {
	Filter   filter
	Rows     []storage.Row
	Next     template.URL // query string of the next page; empty on the last
	First    bool
	Statuses []outbox.Status
}

func (c *Console) events(w http.ResponseWriter, r *http.Request) {
	f := readFilter(r.URL.Query())
	d := eventsData{Filter: f, First: f.After == "",
		Statuses: []outbox.Status{outbox.StatusPending, outbox.StatusDelivering, outbox.StatusDelivered, outbox.StatusDead}}
	p, err := f.params(c.cfg.PageSize + 1)
	if err != nil {
		c.render(w, r, http.StatusBadRequest, "events", page{Title: "Events", Nav: "events", Error: err.Error(), Data: d})
		return
	}
	rows, err := c.admin.List(r.Context(), p)
	if err != nil {
		c.serverError(w, r, "list events", err)
		return
	}
	if len(rows) > c.cfg.PageSize {
		rows = rows[:c.cfg.PageSize]
		v := f.values()
		v.Set("after", storage.CursorOf(rows[len(rows)-1]).String())
		d.Next = template.URL(v.Encode())
	}
	d.Rows = rows
	c.render(w, r, http.StatusOK, "events", page{Title: "Events", Nav: "events", Wide: true, Data: d})
}

// ---- One event --------------------------------------------------------------

type eventData struct {
	Row         storage.Row
	PayloadKind string // json, text or base64
	Payload     string
	Headers     string
	KeyQuery    template.URL
}

func (c *Console) event(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, fmt.Sprintf("%q is not an event id (a UUID)", r.PathValue("id")))
		return
	}
	row, err := c.admin.Get(r.Context(), id)
	if errors.Is(err, storage.ErrEventNotFound) {
		c.fail(w, r, http.StatusNotFound, "no event has the id "+id.String())
		return
	}
	if err != nil {
		c.serverError(w, r, "read event", err)
		return
	}
	d := eventData{Row: row}
	d.PayloadKind, d.Payload = showPayload(row.Payload)
	d.Headers = indentJSON(row.Headers)
	if row.PartitionKey != nil && *row.PartitionKey != "" {
		d.KeyQuery = template.URL(url.Values{"key": {*row.PartitionKey}}.Encode())
	}
	c.render(w, r, http.StatusOK, "event", page{Title: "Event " + id.String(), Nav: "events", Data: d})
}

// showPayload formats a payload as JSON when it is JSON, as text when it
// is printable UTF-8, and as base64 otherwise. The template escapes it.
func showPayload(b []byte) (kind, text string) {
	if json.Valid(b) {
		var out bytes.Buffer
		if json.Indent(&out, b, "", "  ") == nil {
			return "json", out.String()
		}
	}
	if utf8.Valid(b) && printable(string(b)) {
		return "text", string(b)
	}
	return "base64", base64.StdEncoding.EncodeToString(b)
}

func printable(s string) bool {
	for _, r := range s {
		if !unicode.IsPrint(r) && !unicode.IsSpace(r) {
			return false
		}
	}
	return true
}

// indentJSON shows headers as indented JSON, with the characters a
// producer's encoder may have escaped (\u003c) shown as themselves: the
// template escapes them for HTML.
func indentJSON(b []byte) string {
	var v any
	if len(b) == 0 || json.Unmarshal(b, &v) != nil {
		return string(b)
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if enc.Encode(v) != nil {
		return string(b)
	}
	return strings.TrimSuffix(out.String(), "\n")
}

// ---- Actions ----------------------------------------------------------------

// action checks what every action needs: a console that allows actions
// and a same-origin POST with this browser's token.
func (c *Console) action(w http.ResponseWriter, r *http.Request) bool {
	if c.cfg.ReadOnly {
		c.fail(w, r, http.StatusForbidden, "this console is read-only (--read-only): actions are turned off")
		return false
	}
	if msg, ok := c.checkPost(r); !ok {
		c.fail(w, r, http.StatusForbidden, msg)
		return false
	}
	return true
}

func (c *Console) retryOne(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, fmt.Sprintf("%q is not an event id (a UUID)", r.PathValue("id")))
		return
	}
	if !c.action(w, r) {
		return
	}
	n, err := c.admin.RetryDead(r.Context(), storage.RetryDeadParams{DeadFilter: storage.DeadFilter{IDs: []uuid.UUID{id}}})
	if err != nil {
		c.serverError(w, r, "retry event", err)
		return
	}
	user, addr := actor(r)
	c.log.Info("console: retry dead event", "event_id", id, "moved", n, "user", user, "remote", addr)
	done := "retried"
	if n == 0 {
		done = "notdead"
	}
	http.Redirect(w, r, "/events/"+id.String()+"?done="+done, http.StatusSeeOther)
}

type confirmData struct {
	Filter filter
	Count  int
	Capped bool
	Max    int
}

// retryMatching retries the DEAD events the posted filter selects: without
// confirm=yes it only counts them and asks; with it, it moves them. Both go
// through RetryDead with the filter, as `relay-cli retry-dead` does, so the
// count and the move read the same rows (the DEAD index) and move only rows
// still DEAD, at most RetryMatchingMax at once.
func (c *Console) retryMatching(w http.ResponseWriter, r *http.Request) {
	if !c.action(w, r) {
		return
	}
	f := readFilter(r.PostForm)
	f.Status, f.After, f.Order = string(outbox.StatusDead), "", ""
	p, err := f.params(0)
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	retry := storage.RetryDeadParams{Limit: RetryMatchingMax, DeadFilter: storage.DeadFilter{
		EventType: p.EventType, PartitionKey: p.PartitionKey, ErrorContains: p.ErrorContains,
		CreatedFrom: p.CreatedFrom, CreatedBefore: p.CreatedBefore}}
	if p.EventID != uuid.Nil {
		retry.IDs = []uuid.UUID{p.EventID}
	}
	if r.PostFormValue("confirm") != "yes" {
		dry := retry
		dry.DryRun = true
		n, err := c.admin.RetryDead(r.Context(), dry)
		if err != nil {
			c.serverError(w, r, "count dead events", err)
			return
		}
		c.render(w, r, http.StatusOK, "confirm", page{Title: "Retry DEAD events", Nav: "events",
			Data: confirmData{Filter: f, Count: int(n), Capped: n == RetryMatchingMax, Max: RetryMatchingMax}})
		return
	}
	n, err := c.admin.RetryDead(r.Context(), retry)
	if err != nil {
		c.serverError(w, r, "retry events", err)
		return
	}
	user, addr := actor(r)
	c.log.Info("console: retry dead events", "filter", f.values().Encode(), "moved", n, "user", user, "remote", addr)
	v := f.values()
	v.Set("done", "retrymany")
	http.Redirect(w, r, "/events?"+v.Encode(), http.StatusSeeOther)
}

// ---- Prune preview ----------------------------------------------------------

type pruneData struct {
	Status    string
	OlderThan string
	Count     int64
	Asked     bool
}

// prunePreview counts what `relay-cli prune` would delete: a dry run,
// never a deletion.
func (c *Console) prunePreview(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := pruneData{Status: strings.ToUpper(q.Get("status")), OlderThan: q.Get("older_than")}
	if d.Status == "" {
		d.Status = string(outbox.StatusDelivered)
	}
	if d.OlderThan == "" {
		c.render(w, r, http.StatusOK, "prune", page{Title: "Prune preview", Nav: "prune", Data: d})
		return
	}
	// The syntax of relay-cli prune --older-than, so a period copied from one
	// works in the other (7d included).
	older, err := duration.Parse(d.OlderThan)
	if err != nil {
		c.render(w, r, http.StatusBadRequest, "prune", page{Title: "Prune preview", Nav: "prune",
			Error: "older than: " + err.Error(), Data: d})
		return
	}
	if st := outbox.Status(d.Status); st != outbox.StatusDelivered && st != outbox.StatusDead {
		c.render(w, r, http.StatusBadRequest, "prune", page{Title: "Prune preview", Nav: "prune",
			Error: fmt.Sprintf("status: only DELIVERED and DEAD events are pruned, not %q", d.Status), Data: d})
		return
	}
	res, err := c.admin.Prune(r.Context(), storage.PruneParams{Status: outbox.Status(d.Status), OlderThan: older, DryRun: true})
	if err != nil {
		c.serverError(w, r, "count prunable events", err)
		return
	}
	d.Count, d.Asked = res.Deleted, true
	c.render(w, r, http.StatusOK, "prune", page{Title: "Prune preview", Nav: "prune", Data: d})
}

// ---- Formatting -------------------------------------------------------------

func age(d time.Duration) string {
	switch {
	case d <= 0:
		return "—"
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000000Z")
}

// stampSeconds is stamp to the second, for the list: its title holds the
// whole stamp.
func stampSeconds(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

func stampOrDash(t *time.Time) string {
	if t == nil {
		return "—"
	}
	return stamp(*t)
}

func derefOr(s *string, or string) string {
	if s == nil {
		return or
	}
	return *s
}
