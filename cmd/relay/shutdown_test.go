package main

import (
	"bytes"
	"context"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/tcpproxy"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher/nats/natstest"
	"github.com/outbox-relay/relay/pkg/reaper"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/postgres/pgtest"
)

// throughProxy returns the test database's URL with its host replaced by a
// proxy to it, naming table.
func throughProxy(t *testing.T, table string) (string, *tcpproxy.Proxy) {
	t.Helper()
	u, err := url.Parse(pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := tcpproxy.Start(t, u.Host)
	u.Host = proxy.Addr()
	return storage.URLWithTable(u.String(), table), proxy
}

// TestSIGTERMWithAHungDatabaseExitsWithinItsBudget: the database stops
// answering in the middle of a drain, then SIGTERM arrives. The relay must
// exit 0 within SHUTDOWN_TIMEOUT plus a few seconds (Kubernetes would kill
// it otherwise), and leave only what the reaper recovers: rows DELIVERING,
// nothing DEAD, nothing lost.
func TestSIGTERMWithAHungDatabaseExitsWithinItsBudget(t *testing.T) {
	t.Parallel()
	bin := buildRelay(t)
	tb := pgtest.New(t)
	srv := natstest.Start(t)
	st := srv.Stream(t, jetstream.StreamConfig{Name: "HUNG", Subjects: []string{"hung.>"}})
	storageURL, proxy := throughProxy(t, tb.Name)
	const n = 30000
	tb.InsertN(t, n, "hung.event")

	const budget = 2 * time.Second
	cmd := exec.Command(bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Env = append(os.Environ(),
		"STORAGE_URL="+storageURL,
		"PUBLISHER_URL="+srv.URL(),
		"HTTP_ADDR=127.0.0.1:0",
		"BATCH_SIZE=200",
		"SHUTDOWN_TIMEOUT="+budget.String(),
		"LOG_FORMAT=text",
	)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	eventually.True(t, 30*time.Second, func() bool { return natstest.Count(t, st) > 1000 },
		func() string { return "deliveries under way; relay log:\n" + stderr.String() })

	t.Logf("%s: deliveries under way", time.Now().Format(time.StampMilli))
	proxy.Freeze()
	sent := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// SHUTDOWN_TIMEOUT, 3 s to hand back what was not sent, 5 s to close
	// the rest, and a little for the process itself.
	const limit = budget + 10*time.Second
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("relay exited with %v; log:\n%s", err, stderr.String())
		}
		if took := time.Since(sent); took > limit {
			t.Fatalf("relay took %s to exit with SHUTDOWN_TIMEOUT=%s; log:\n%s", took, budget, stderr.String())
		}
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("relay still running a minute after SIGTERM with the database hung; log:\n%s", stderr.String())
	}
	if strings.Contains(stderr.String(), "level=ERROR msg=\"relay stopped with an error\"") {
		t.Errorf("a stop with a hung database was logged as the relay's error:\n%s", stderr.String())
	}

	t.Logf("%s: exited after %s", time.Now().Format(time.StampMilli), time.Since(sent))
	// The database answers again: what was left DELIVERING is the reaper's,
	// and after it nothing is lost or dead.
	proxy.Thaw()
	c := tb.Counts(t)
	if c[outbox.StatusDead] != 0 {
		t.Fatalf("rows DEAD after the shutdown: %v", c)
	}
	tb.Exec(t, "UPDATE {{table}} SET locked_at = locked_at - interval '1 hour' WHERE status = 'DELIVERING'")
	rp, err := reaper.New(reaper.Config{Interval: time.Second, LeaseTimeout: time.Minute, BatchSize: 1000, MaxAttempts: 25}, tb.Store)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rp.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	c = tb.Counts(t)
	if c[outbox.StatusPending]+c[outbox.StatusDelivered] != n || c[outbox.StatusDelivered] == 0 {
		t.Errorf("after the reaper: %v, want every one of %d rows PENDING or DELIVERED", c, n)
	}
	if got := natstest.Count(t, st); got < uint64(c[outbox.StatusDelivered]) {
		t.Errorf("stream holds %d messages but %d rows are DELIVERED", got, c[outbox.StatusDelivered])
	}
}
