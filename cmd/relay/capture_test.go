package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/pgcluster"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher/nats/natstest"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/postgres/pgtest"
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
	code, _, stderr = runRelay(t, map[string]string{
		"STORAGE_URL":   "mysql://root@127.0.0.1:3306/test",
		"CAPTURE":       "wal",
		"PUBLISHER_URL": "null://",
	})
	if code != 2 || !strings.Contains(stderr, "CAPTURE=wal") {
		t.Fatalf("MySQL: exit %d, want 2; stderr:\n%s", code, stderr)
	}
	code, _, stderr = runRelay(t, map[string]string{"CAPTURE": "binlog", "PUBLISHER_URL": "null://"})
	if code != 2 || !strings.Contains(stderr, "CAPTURE must be poll or wal") {
		t.Fatalf("CAPTURE=binlog: exit %d, want 2; stderr:\n%s", code, stderr)
	}
}

// walProcess is the relay binary running with CAPTURE=wal.
type walProcess struct {
	cmd    *exec.Cmd
	addr   string
	stderr *syncBuffer
	exited chan struct{} // closed when the process has exited
}

// syncBuffer is a bytes.Buffer safe for a process's writes and the test's
// reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startWALRelay(t *testing.T, bin, storageURL, publisherURL, id string) *walProcess {
	t.Helper()
	p := &walProcess{addr: freeAddr(t), stderr: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(bin)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p.cmd.Env = append(os.Environ(),
		"STORAGE_URL="+storageURL,
		"STORAGE_AUTO_MIGRATE=true",
		"CAPTURE=wal",
		"RELAY_ID="+id,
		"PUBLISHER_URL="+publisherURL,
		"HTTP_ADDR="+p.addr,
		"POLL_INTERVAL=100ms",
		"LOG_FORMAT=text",
	)
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() { _ = p.cmd.Process.Kill() })
	return p
}

// capture reads /readyz's capture check.
func (p *walProcess) capture() string {
	resp, err := http.Get("http://" + p.addr + "/readyz")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var body struct {
		Checks map[string]string `json:"checks"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return body.Checks["capture"]
}

// The real binary with CAPTURE=wal and a standby: the streaming relay is
// SIGKILLed three times mid-stream, a new one started each time; every
// event reaches the broker, none goes DEAD, and the duplicates (same
// event id, which JetStream drops) stay within the unacknowledged windows.
func TestCaptureWALSurvivesSIGKILLWithAStandby(t *testing.T) {
	t.Parallel()
	bin := buildRelay(t)
	c := pgcluster.Start(t, pgcluster.Options{})
	db := c.CreateDatabase(t)
	tb := pgtest.NewAt(t, c.URL(db))
	storageURL := storage.URLWithTable(c.URL(db), tb.Name)
	srv := natstest.Start(t)
	st := srv.Stream(t, jetstream.StreamConfig{Name: "WAL", Subjects: []string{"wal.>"}})

	relays := []*walProcess{
		startWALRelay(t, bin, storageURL, srv.URL(), "r0"),
		startWALRelay(t, bin, storageURL, srv.URL(), "r1"),
	}
	streaming := func() *walProcess {
		for _, p := range relays {
			select {
			case <-p.exited:
				continue
			default:
			}
			if strings.Contains(p.stderr.String(), "streaming from the replication slot") ||
				strings.Contains(p.stderr.String(), "made the replication slot") {
				return p
			}
		}
		return nil
	}
	eventually.True(t, 60*time.Second, func() bool { return streaming() != nil },
		func() string {
			return "a relay to stream; logs:\n" + relays[0].stderr.String() + relays[1].stderr.String()
		})

	const perRound = 3000
	total := 0
	for round := 0; round < 3; round++ {
		tb.InsertN(t, perRound, "wal.event")
		total += perRound
		victim := streaming()
		eventually.True(t, 30*time.Second, func() bool { return tb.Counts(t)[outbox.StatusDelivered] > total-perRound },
			func() string { return "deliveries of this round to begin" })
		// Mid-stream: some of the round delivered, not all.
		if victim != nil {
			_ = victim.cmd.Process.Signal(syscall.SIGKILL)
			<-victim.exited
		}
		relays = append(relays, startWALRelay(t, bin, storageURL, srv.URL(), "r"+string(rune('2'+round))))
		eventually.True(t, 30*time.Second, func() bool { return streaming() != nil && streaming() != victim },
			func() string {
				var b strings.Builder
				for _, p := range relays {
					b.WriteString(p.stderr.String())
				}
				return "a standby to take over; logs:\n" + b.String()
			})
	}
	eventually.True(t, 60*time.Second, func() bool { return tb.Counts(t)[outbox.StatusDelivered] == total },
		func() string { return "every event DELIVERED" })
	if got := natstest.Count(t, st); got != uint64(total) {
		t.Fatalf("stream holds %d messages, want %d", got, total)
	}
	if cnt := tb.Counts(t); cnt[outbox.StatusDead] != 0 {
		t.Fatalf("events went DEAD: %v", cnt)
	}
	if s := streaming(); s == nil || s.capture() != "ok" {
		t.Errorf("/readyz capture check of the streaming relay is not ok")
	}
}
