package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/internal/pgcluster"
	"github.com/outbox-relay/relay/pkg/capture/pgwal"
	"github.com/outbox-relay/relay/pkg/storage"
)

// CAPTURE=wal on a database without wal_level=logical (the shared server
// runs with replica), or with MySQL, is a configuration error: exit 2
// naming the setting and the fix.
func TestCaptureWALConfigurationErrorsExit2(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	code, _, stderr := runRelay(t, map[string]string{
		"STORAGE_URL":          tb.URL,
		"STORAGE_AUTO_MIGRATE": "true",
		"CAPTURE":              "wal",
		"PUBLISHER_URL":        "null://",
		"HTTP_ADDR":            "127.0.0.1:0",
	})
	if code != 2 || !strings.Contains(stderr, "wal_level") || !strings.Contains(stderr, "CAPTURE=poll") {
		t.Fatalf("wal_level=replica: exit %d, want 2 naming wal_level and the way out; stderr:\n%s", code, stderr)
	}
	// Nothing was made for a mode the database cannot serve: a
	// publication would outlive the test's schema on the shared server.
	var pubs int
	if err := tb.Pool().QueryRow(context.Background(), "SELECT count(*) FROM pg_publication WHERE pubname = $1",
		tb.WAL(pgwal.Config{}).PublicationName()).Scan(&pubs); err != nil || pubs != 0 {
		t.Fatalf("a publication was created for a database without logical WAL (%d, %v)", pubs, err)
	}
	code, _, stderr = runRelay(t, map[string]string{
		"STORAGE_URL":   "mysql://root@127.0.0.1:3306/test",
		"CAPTURE":       "wal",
		"PUBLISHER_URL": "null://",
	})
	if code != 2 || !strings.Contains(stderr, "CAPTURE=wal") {
		t.Fatalf("MySQL: exit %d, want 2; stderr:\n%s", code, stderr)
	}
}

// A role without REPLICATION cannot stream the WAL: exit 2 saying what to
// grant.
func TestCaptureWALWithoutReplicationExits2(t *testing.T) {
	t.Parallel()
	c := pgcluster.Start(t, pgcluster.Options{})
	db := c.CreateDatabase(t)
	tb := pgtest.NewAt(t, c.URL(db))
	tb.CreatePublication(t, "")
	schemaName, _, _ := strings.Cut(tb.Name, ".")
	c.Exec(t, db, "CREATE ROLE relay_norepl LOGIN")
	c.Exec(t, db, "GRANT USAGE ON SCHEMA "+schemaName+" TO relay_norepl")
	c.Exec(t, db, "GRANT SELECT, UPDATE, DELETE ON "+tb.Name+" TO relay_norepl")
	u := strings.Replace(c.URL(db), "postgres@", "relay_norepl@", 1)
	code, _, stderr := runRelay(t, map[string]string{
		"STORAGE_URL":   storage.URLWithTable(u, tb.Name),
		"CAPTURE":       "wal",
		"PUBLISHER_URL": "null://",
		"HTTP_ADDR":     "127.0.0.1:0",
	})
	if code != 2 || !strings.Contains(stderr, "REPLICATION") {
		t.Fatalf("exit %d, want 2 naming REPLICATION; stderr:\n%s", code, stderr)
	}
}

// With CAPTURE=wal the relay wires the capture to its observer: the events
// the log brings are recorded (record_delivered in storage.latency, through
// the engine's observer) and counted, and the capture's own gauges say it
// streams and how much WAL its slot keeps.
func TestCaptureWALIsObserved(t *testing.T) {
	t.Parallel()
	c := pgcluster.Start(t, pgcluster.Options{})
	db := c.CreateDatabase(t)
	tb := pgtest.NewAt(t, c.URL(db))
	r := startRelay(t, map[string]string{
		"STORAGE_URL":          storage.URLWithTable(c.URL(db), tb.Name),
		"STORAGE_AUTO_MIGRATE": "true",
		"CAPTURE":              "wal",
		"PUBLISHER_URL":        "null://",
		"POLL_INTERVAL":        "1h", // the log, not the claims, must bring the events
	})
	var last scraped
	eventually.True(t, 30*time.Second, func() bool {
		last = r.scrape(t)
		v, ok := last.value("openoutbox_wal_streaming")
		return ok && v == 1
	}, func() string {
		return "openoutbox_wal_streaming 1; last scrape:" + last.describe("openoutbox_wal_streaming") + "\nrelay log:\n" + r.log.String()
	})
	const n = 20
	tb.InsertN(t, n, "wal.observed")
	eventually.True(t, 30*time.Second, func() bool {
		last = r.scrape(t)
		delivered, _ := last.value("openoutbox_events_total", "status", "success")
		recorded, _ := last.value("openoutbox_storage_latency_seconds", "op", "record_delivered", "status", "success")
		_, retained := last.value("openoutbox_wal_retained_bytes")
		return delivered == n && recorded > 0 && retained
	}, func() string {
		return fmt.Sprintf("%d events delivered and recorded from the log, retained bytes read; last scrape:", n) +
			last.describe("openoutbox_events_total", "openoutbox_storage_latency_seconds", "openoutbox_wal_retained_bytes") +
			"\nrelay log:\n" + r.log.String()
	})
	if v, ok := last.value("openoutbox_wal_slot_recreated_total"); !ok || v != 0 {
		t.Errorf("openoutbox_wal_slot_recreated_total = %g (present %v), want 0", v, ok)
	}
}

// Issue 42, case 3: a publication dropped under a running relay. The relay
// keeps running (it used to exit), /readyz says what happened and what to
// run, and once migrate makes the publication again it streams from a new
// slot and /readyz is ok.
func TestCaptureWALDroppedPublicationIsInReadyzAndHeals(t *testing.T) {
	t.Parallel()
	c := pgcluster.Start(t, pgcluster.Options{})
	db := c.CreateDatabase(t)
	tb := pgtest.NewAt(t, c.URL(db))
	r := startRelay(t, map[string]string{
		"STORAGE_URL":          storage.URLWithTable(c.URL(db), tb.Name),
		"STORAGE_AUTO_MIGRATE": "true",
		"CAPTURE":              "wal",
		"PUBLISHER_URL":        "null://",
	})
	ready := func() string {
		resp, err := http.Get("http://" + r.addr + "/readyz")
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		var body struct {
			Checks map[string]string `json:"checks"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return body.Checks["capture"]
	}
	// Ready says ok while the capture starts, too: the stream must be
	// open before the publication goes, or the relay exits 2 as it
	// should at a start without one.
	eventually.True(t, 30*time.Second, func() bool {
		return ready() == "ok" && strings.Contains(r.log.String(), "made the replication slot")
	}, func() string { return "/readyz capture ok and the stream open; relay log:\n" + r.log.String() })
	name := tb.WAL(pgwal.Config{}).PublicationName()
	c.Exec(t, db, "DROP PUBLICATION "+name)
	var last string
	eventually.True(t, 30*time.Second, func() bool {
		last = ready()
		return strings.Contains(last, "publication "+name+" does not exist") && strings.Contains(last, "relay-cli migrate --capture wal")
	}, func() string {
		return "/readyz naming the dropped publication, last: " + last + "\nrelay log:\n" + r.log.String()
	})
	select {
	case code := <-r.done:
		t.Fatalf("the relay exited (%d) when its publication was dropped", code)
	default:
	}
	if err := pgwal.CreatePublication(context.Background(), tb.WAL(pgwal.Config{})); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 60*time.Second, func() bool { last = ready(); return last == "ok" },
		func() string {
			return "/readyz ok again after migrate, last: " + last + "\nrelay log:\n" + r.log.String()
		})
}
