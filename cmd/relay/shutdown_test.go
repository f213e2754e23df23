package main

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/kafkatest"
	"github.com/outbox-relay/relay/internal/harness/natstest"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/internal/syncbuf"
	"github.com/outbox-relay/relay/internal/tcpproxy"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/reaper"
	"github.com/outbox-relay/relay/pkg/storage"
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

// shutdownMargin is what the exit check allows beyond SHUTDOWN_TIMEOUT,
// which bounds the whole shutdown: the process's own exit and the test
// noticing it, on a loaded 2-core machine with a race-built binary. No step
// of the relay's may use it.
const shutdownMargin = 1500 * time.Millisecond

// relayProcess is the relay binary, running.
type relayProcess struct {
	cmd    *exec.Cmd
	log    *syncbuf.Buffer
	exited chan error
}

// startProcess runs bin with the test's environment plus env, logging as
// text.
func startProcess(t *testing.T, bin string, env ...string) *relayProcess {
	t.Helper()
	p := &relayProcess{cmd: exec.Command(bin), log: &syncbuf.Buffer{}, exited: make(chan error, 1)}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// A race-built binary sleeps a second before it exits unless told
	// not to: time the relay, not the race detector.
	gorace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	p.cmd.Env = append(append(os.Environ(), "HTTP_ADDR=127.0.0.1:0", "LOG_FORMAT=text", "GORACE="+gorace), env...)
	p.cmd.Stderr = p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() { _ = p.cmd.Process.Kill() })
	return p
}

// sigtermWithin sends SIGTERM and checks that the relay exits 0 within
// budget, its SHUTDOWN_TIMEOUT, having logged "relay stopped" last.
func (p *relayProcess) sigtermWithin(t *testing.T, budget time.Duration) {
	t.Helper()
	sent := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	limit := budget + shutdownMargin
	select {
	case err := <-p.exited:
		took := time.Since(sent)
		t.Logf("exited %s after SIGTERM", took)
		if err != nil {
			t.Fatalf("relay exited with %v; log:\n%s", err, p.log)
		}
		if took > limit {
			t.Fatalf("relay took %s to exit with SHUTDOWN_TIMEOUT=%s, want at most %s; log:\n%s", took, budget, limit, p.log)
		}
	case <-time.After(time.Minute):
		t.Fatalf("relay still running a minute after SIGTERM; log:\n%s", p.log)
	}
	lines := strings.Split(strings.TrimRight(p.log.String(), "\n"), "\n")
	if last := lines[len(lines)-1]; !strings.Contains(last, `msg="relay stopped"`) {
		t.Errorf("the log's last line is %q, want \"relay stopped\"; log:\n%s", last, p.log)
	}
	if strings.Contains(p.log.String(), "level=ERROR msg=\"relay stopped with an error\"") {
		t.Errorf("a stop with something hung was logged as the relay's error:\n%s", p.log)
	}
}

// TestSIGTERMWithAHungDatabaseExitsWithinItsBudget: the database stops
// answering in the middle of a drain, then SIGTERM arrives. The relay must
// exit 0 within SHUTDOWN_TIMEOUT (Kubernetes would kill it otherwise), log
// "relay stopped" last, and leave only what the reaper recovers: rows
// DELIVERING, nothing DEAD, nothing lost.
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
	p := startProcess(t, bin,
		"STORAGE_URL="+storageURL,
		"PUBLISHER_URL="+srv.URL(),
		"BATCH_SIZE=200",
		"SHUTDOWN_TIMEOUT="+budget.String(),
	)
	eventually.True(t, 30*time.Second, func() bool { return natstest.Count(t, st) > 1000 },
		func() string { return "deliveries under way; relay log:\n" + p.log.String() })

	t.Logf("%s: deliveries under way", time.Now().Format(time.StampMilli))
	proxy.Freeze()
	p.sigtermWithin(t, budget)

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

// TestSIGTERMWithAHungKafkaExitsWithinItsBudget: Kafka stops answering any
// request in the middle of a drain, then SIGTERM arrives. Publishes in
// flight are cut off and their events released, the publisher's close,
// which waits for the writes in flight, is given up on in time and says so
// before the last line, and the relay exits 0 within SHUTDOWN_TIMEOUT.
func TestSIGTERMWithAHungKafkaExitsWithinItsBudget(t *testing.T) {
	t.Parallel()
	bin := buildRelay(t)
	tb := pgtest.New(t)
	c := kafkatest.Start(t, kfake.NumBrokers(1))
	topic := "hung-" + tb.Name
	c.CreateTopic(t, topic, 1, nil)
	const n = 30000
	tb.InsertN(t, n, topic)

	const budget = 2 * time.Second
	p := startProcess(t, bin,
		"STORAGE_URL="+tb.URL,
		"PUBLISHER_URL="+c.URL(""),
		"BATCH_SIZE=200",
		"SHUTDOWN_TIMEOUT="+budget.String(),
	)
	eventually.True(t, 30*time.Second, func() bool { return tb.Counts(t)[outbox.StatusDelivered] > 1000 },
		func() string { return "deliveries under way; relay log:\n" + p.log.String() })

	// From now on the broker reads every request and answers none.
	kc := c.Fake()
	var swallowed atomic.Int64
	kc.Control(func(req kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		if req.Key() == int16(kmsg.Produce) {
			swallowed.Add(1)
		}
		return nil, nil, true
	})
	eventually.True(t, 30*time.Second, func() bool { return swallowed.Load() > 0 },
		func() string { return "a produce request waiting for its answer; relay log:\n" + p.log.String() })
	p.sigtermWithin(t, budget)
	if !strings.Contains(p.log.String(), "closing the publisher") {
		t.Errorf("the log does not say that closing the hung publisher was given up on:\n%s", p.log)
	}

	counts := tb.Counts(t)
	if counts[outbox.StatusDead] != 0 {
		t.Errorf("rows DEAD after the shutdown: %v", counts)
	}
	if got := counts[outbox.StatusPending] + counts[outbox.StatusDelivering] + counts[outbox.StatusDelivered]; got != n {
		t.Errorf("after the shutdown: %v, want all %d rows PENDING, DELIVERING or DELIVERED", counts, n)
	}
}
