package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/mysqltest"
	"github.com/outbox-relay/relay/internal/mycluster"
	"github.com/outbox-relay/relay/pkg/outbox"
)

// CAPTURE=binlog on a server that logs statements: exit 2 naming
// binlog_format and the fix. The table is made while the server logs rows
// (InnoDB refuses the migrate's statements under STATEMENT at READ
// COMMITTED), then the server is switched back.
func TestCaptureBinlogStatementFormatExits2(t *testing.T) {
	t.Parallel()
	c := mycluster.Start(t, mycluster.Options{Args: []string{"--binlog-format=STATEMENT"}})
	db := c.DB(t)
	if _, err := db.Exec("SET GLOBAL binlog_format = 'ROW'"); err != nil {
		t.Fatal(err)
	}
	tb := mysqltest.NewAt(t, c.URL(""))
	if _, err := db.Exec("SET GLOBAL binlog_format = 'STATEMENT'"); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runRelay(t, map[string]string{
		"STORAGE_URL":   tb.URL,
		"CAPTURE":       "binlog",
		"PUBLISHER_URL": "null://",
		"HTTP_ADDR":     "127.0.0.1:0",
	})
	if code != 2 || !strings.Contains(stderr, "binlog_format=STATEMENT") || !strings.Contains(stderr, "set binlog_format=ROW") ||
		!strings.Contains(stderr, "CAPTURE=poll") {
		t.Fatalf("binlog_format=STATEMENT: exit %d, want 2 naming the setting and the fix; stderr:\n%s", code, stderr)
	}
}

// CAPTURE=binlog on the shared MariaDB, which runs without its binary log,
// and with a PostgreSQL STORAGE_URL: exit 2 naming what to change.
func TestCaptureBinlogConfigurationErrorsExit2(t *testing.T) {
	t.Parallel()
	tb := mysqltest.New(t)
	code, _, stderr := runRelay(t, map[string]string{
		"STORAGE_URL":   tb.URL,
		"CAPTURE":       "binlog",
		"PUBLISHER_URL": "null://",
		"HTTP_ADDR":     "127.0.0.1:0",
	})
	if code != 2 || !strings.Contains(stderr, "log_bin=OFF") || !strings.Contains(stderr, "--log-bin") {
		t.Fatalf("log_bin off: exit %d, want 2 naming log_bin and the fix; stderr:\n%s", code, stderr)
	}
	for _, env := range []map[string]string{
		{"CAPTURE": "binlog", "PUBLISHER_URL": "null://"}, // STORAGE_URL's default is PostgreSQL's
		{"CAPTURE": "binlog", "PUBLISHER_URL": "null://", "STORAGE_URL": "postgres://postgres@127.0.0.1:5432/postgres"},
	} {
		code, _, stderr = runRelay(t, env)
		if code != 2 || !strings.Contains(stderr, "CAPTURE=binlog") || !strings.Contains(stderr, "use CAPTURE=wal or CAPTURE=poll") {
			t.Errorf("CAPTURE=binlog on PostgreSQL: exit %d, want 2 naming CAPTURE=wal and poll; stderr:\n%s", code, stderr)
		}
	}
}

// BINLOG_SERVER_ID is a replica id, a uint32: anything else is exit 2
// naming it.
func TestCaptureBinlogServerIDMustBeAUint32(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"abc", "-1", "4294967296", "1.5"} {
		code, _, stderr := runRelay(t, map[string]string{
			"STORAGE_URL":      "mysql://root@127.0.0.1:3306/test",
			"CAPTURE":          "binlog",
			"BINLOG_SERVER_ID": v,
			"PUBLISHER_URL":    "null://",
		})
		if code != 2 || !strings.Contains(stderr, "BINLOG_SERVER_ID") {
			t.Errorf("BINLOG_SERVER_ID=%s: exit %d, want 2 naming it; stderr:\n%s", v, code, stderr)
		}
	}
}

// A relay with CAPTURE=binlog on a server with its log on: it migrates the
// position table, streams (/readyz ok, openoutbox_wal_streaming 1), the
// log brings the events (POLL_INTERVAL is an hour) to DELIVERED, and a
// SIGTERM stops it with exit 0.
func TestCaptureBinlogDeliversFromTheLog(t *testing.T) {
	t.Parallel()
	c := mycluster.Start(t, mycluster.Options{})
	tb := mysqltest.NewAt(t, c.URL(""))
	r := startRelay(t, map[string]string{
		"STORAGE_URL":          tb.URL,
		"STORAGE_AUTO_MIGRATE": "true",
		"CAPTURE":              "binlog",
		"PUBLISHER_URL":        "null://",
		"POLL_INTERVAL":        "1h", // the log, not the claims, must bring the events
	})
	var last scraped
	var ready readyBody
	eventually.True(t, 30*time.Second, func() bool {
		var code int
		code, ready = r.ready(t)
		last = r.scrape(t)
		v, ok := last.value("openoutbox_wal_streaming")
		return code == http.StatusOK && ready.Checks["capture"] == "ok" && ok && v == 1
	}, func() string {
		return fmt.Sprintf("/readyz capture ok and openoutbox_wal_streaming 1; /readyz %+v, last scrape:%s\nrelay log:\n%s",
			ready, last.describe("openoutbox_wal_streaming"), r.log.String())
	})
	// Streaming, the log brings every event at its commit: the bound is
	// exact, though MySQL's polling bound is not (/readyz's answer may be
	// from a moment before the stream began).
	eventually.True(t, 30*time.Second, func() bool {
		_, ready = r.ready(t)
		return ready.ClaimBound != nil && ready.ClaimBound.Exact
	}, func() string {
		return fmt.Sprintf("/readyz claim_bound exact while the binlog streams; /readyz %+v", ready)
	})
	if log := r.log.String(); !strings.Contains(log, "reading new events from the binary log") {
		t.Errorf("the log does not say the relay reads the binary log:\n%s", log)
	}
	var positions int
	if err := c.DB(t).QueryRowContext(context.Background(), "SELECT count(*) FROM `"+tb.Database+"`.outbox_relay_positions").Scan(&positions); err != nil || positions != 1 {
		t.Errorf("outbox_relay_positions holds %d rows (%v), want the table's", positions, err)
	}
	const n = 20
	tb.InsertN(t, n, "binlog.delivered")
	var counts map[outbox.Status]int
	eventually.True(t, 30*time.Second, func() bool {
		counts = tb.Counts(t)
		return counts[outbox.StatusDelivered] == n
	}, func() string {
		return fmt.Sprintf("%d events DELIVERED from the log, have %v; relay log:\n%s", n, counts, r.log.String())
	})
	if code := r.stop(t); code != 0 {
		t.Fatalf("SIGTERM: exit %d, want 0; relay log:\n%s", code, r.log.String())
	}
}
