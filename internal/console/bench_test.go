package console_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/relay/internal/console"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/postgres"
	schema "github.com/outbox-relay/relay/schema/postgres"
)

// benchRowsDefault is the table size BenchmarkPages seeds: the console's
// pages must answer on a long delivered history as on a small table.
const benchRowsDefault = 5_000_000

// benchSeed fills the table in one statement per million rows: 30 days of
// history, oldest first, of 20 event types and 100,000 keys (every tenth
// event without one); 1% DEAD, the newest 20,000 PENDING, the rest
// DELIVERED two seconds after they were created. $1 and $2 are the range
// of the series, $3 the total.
const benchSeed = `
INSERT INTO {{table}} (event_id, event_type, partition_key, payload, status, attempts, last_error,
                       available_at, delivered_at, created_at, updated_at)
SELECT gen_random_uuid(), 'type-' || lpad((g % 20)::text, 2, '0'),
       CASE WHEN g % 10 = 5 THEN NULL ELSE 'customer-' || (g % 100000) END,
       convert_to('{"order":' || g || ',"lines":[{"sku":"A-1","qty":2}]}', 'UTF8'),
       s.status, CASE s.status WHEN 'DEAD' THEN 10 ELSE 0 END,
       CASE s.status WHEN 'DEAD' THEN CASE WHEN g % 200 = 0 THEN 'timeout after 30s' ELSE 'broker refused: 422' END END,
       c.at, CASE s.status WHEN 'DELIVERED' THEN c.at + interval '2 seconds' END, c.at, c.at + interval '2 seconds'
FROM generate_series($1::bigint, $2::bigint) AS g,
     LATERAL (SELECT now() - interval '30 days' + g * (30 * 86400.0 / $3::bigint) * interval '1 second' AS at) AS c,
     LATERAL (SELECT CASE WHEN g > $3::bigint - 20000 THEN 'PENDING' WHEN g % 100 = 0 THEN 'DEAD' ELSE 'DELIVERED' END AS status) AS s`

// BenchmarkPages times every console page on a seeded PostgreSQL table of
// CONSOLE_BENCH_ROWS rows (5 million unless set). Seeding takes minutes;
// CONSOLE_BENCH_URL names an existing table to use instead (seeded once
// and kept: a storage URL with ?table=), for repeated runs.
//
//	go test -run '^$' -bench Pages -benchtime 20x ./internal/console/
func BenchmarkPages(b *testing.B) {
	n := int64(benchRowsDefault)
	if v := os.Getenv("CONSOLE_BENCH_ROWS"); v != "" {
		var err error
		if n, err = strconv.ParseInt(v, 10, 64); err != nil || n < 100000 {
			b.Fatalf("CONSOLE_BENCH_ROWS=%q: want a number of at least 100000", v)
		}
	}
	ctx := context.Background()
	var store *postgres.Store
	if u := os.Getenv("CONSOLE_BENCH_URL"); u != "" {
		var err error
		if store, err = postgres.Open(ctx, u); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(store.Close)
		if _, err := store.Migrate(ctx, storage.MigrateOptions{}); err != nil {
			b.Fatal(err)
		}
	} else {
		store = pgtest.New(b).Store
	}
	seed(b, store, n)

	c, err := console.New(store, console.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(c)
	b.Cleanup(srv.Close)

	dead, err := store.List(ctx, storage.ListParams{Status: "DEAD", Limit: 1})
	if err != nil || len(dead) == 0 {
		b.Fatalf("no DEAD row: %v", err)
	}
	middle := storage.ListCursor{CreatedAt: time.Now().Add(-15 * 24 * time.Hour), Seq: 1 << 62, ID: uuid.Max}
	day := time.Now().Add(-10 * 24 * time.Hour).UTC()
	pages := []struct{ name, path string }{
		{"overview", "/"},
		{"events", "/events"},
		{"events_oldest", "/events?order=oldest"},
		{"events_page_mid_table", "/events?after=" + middle.String()},
		{"events_DELIVERED_mid_table", "/events?status=DELIVERED&after=" + middle.String()},
		{"events_DEAD", "/events?status=DEAD"},
		{"events_DEAD_error_text", "/events?status=DEAD&q=timeout"},
		{"events_PENDING", "/events?status=PENDING"},
		{"events_type", "/events?type=type-07"},
		{"events_key", "/events?key=customer-4242"},
		{"events_id", "/events?id=" + dead[0].ID.String()},
		{"events_time_range", "/events?" + url.Values{"from": {day.Format("2006-01-02T15:04")},
			"to": {day.Add(time.Hour).Format("2006-01-02T15:04")}}.Encode()},
		{"event", "/events/" + dead[0].ID.String()},
		{"prune_preview_DEAD_7d", "/prune?status=DEAD&older_than=168h"},
	}
	for _, p := range pages {
		if p.path == "" {
			continue
		}
		b.Run(p.name, func(b *testing.B) {
			for b.Loop() {
				get(b, http.DefaultClient, srv.URL+p.path)
			}
		})
	}
	// The confirmation of "retry every DEAD event matching": it counts them
	// (up to RetryMatchingMax) and moves nothing.
	b.Run("retry_matching_confirmation", func(b *testing.B) {
		jar, _ := cookiejar.New(nil)
		client := &http.Client{Jar: jar}
		body := get(b, client, srv.URL+"/events?status=DEAD&q=timeout")
		m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(body)
		if m == nil {
			b.Fatal("no CSRF token")
		}
		for b.Loop() {
			resp, err := client.PostForm(srv.URL+"/events/retry", url.Values{"csrf": {m[1]}, "q": {"timeout"}})
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Fatalf("POST /events/retry = %d", resp.StatusCode)
			}
		}
	})
}

func get(b *testing.B, client *http.Client, u string) string {
	resp, err := client.Get(u)
	if err != nil {
		b.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("GET %s = %d, %v", u, resp.StatusCode, err)
	}
	return string(body)
}

// seed fills the table unless it already holds n rows, and analyzes it.
func seed(b *testing.B, store *postgres.Store, n int64) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, store.ConnString())
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	t, err := schema.ParseTable(store.Table())
	if err != nil {
		b.Fatal(err)
	}
	table := t.Quoted()
	var have int64
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&have); err != nil {
		b.Fatal(err)
	}
	if have >= n {
		return
	}
	if have > 0 {
		b.Fatalf("table %s holds %d rows, not %d: use an empty one", table, have, n)
	}
	start := time.Now()
	const chunk = 1_000_000
	query := strings.ReplaceAll(benchSeed, "{{table}}", table)
	for from := int64(1); from <= n; from += chunk {
		to := min(from+chunk-1, n)
		if _, err := pool.Exec(ctx, query, from, to, n); err != nil {
			b.Fatalf("seed rows %d-%d: %v", from, to, err)
		}
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+table); err != nil {
		b.Fatal(err)
	}
	b.Logf("seeded %d rows in %s", n, time.Since(start).Round(time.Second))
}
