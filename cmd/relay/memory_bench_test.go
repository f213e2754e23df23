package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/relay/internal/harness/natstest"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/outbox"
)

var (
	memoryEvents    = flag.Int("memory.events", 1_000_000, "backlog BenchmarkDrainMemory drains")
	memoryPayload   = flag.Int("memory.payload", 200, "payload bytes of each event BenchmarkDrainMemory drains")
	memoryPublisher = flag.String("memory.publisher", "nats", "where BenchmarkDrainMemory publishes: nats (in-process JetStream) or null")
)

// BenchmarkDrainMemory runs the relay binary, with its default settings,
// over a backlog of -memory.events events of -memory.payload bytes into
// JetStream (or null://) and samples its resident memory (VmRSS) every
// 250 ms: it reports the peak and the readings at each quarter of the
// drain, which should be flat.
func BenchmarkDrainMemory(b *testing.B) {
	bin := buildRelayBinary(b, false) // the race detector would multiply memory
	tb := pgtest.New(b)
	publisherURL := "null://"
	if *memoryPublisher == "nats" {
		srv := natstest.Start(b, func(o *server.Options) { o.MaxPayload = 64 << 20 })
		srv.Stream(b, jetstream.StreamConfig{Name: "MEMORY", Subjects: []string{"memory.>"}, Storage: jetstream.FileStorage})
		publisherURL = srv.URL()
	}
	n, size := *memoryEvents, *memoryPayload
	// Inserts of at most about 64 MB each.
	chunk := max(1, min(100_000, (64<<20)/size))
	for done := 0; done < n; done += chunk {
		events := make([]pgtest.Event, min(chunk, n-done))
		for i := range events {
			events[i] = pgtest.Event{Type: "memory.event", Payload: pgtest.Payload(done+i, size)}
		}
		tb.Insert(b, events...)
	}
	tb.Exec(b, "VACUUM ANALYZE {{table}}")

	b.ResetTimer()
	cmd := exec.Command(bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with the test
	cmd.Env = append(os.Environ(), "STORAGE_URL="+pgtest.URL(), "STORAGE_TABLE_NAME="+tb.Name,
		"PUBLISHER_URL="+publisherURL, "HTTP_ADDR=127.0.0.1:0", "LOG_LEVEL=warn")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	began := time.Now()
	var peak int64
	quarters := make([]int64, 0, 4)
	// Sample every 250 ms; count progress once a second, since counting a
	// million rows is itself work for the database.
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Minute)
	for samples := 0; len(quarters) < 4; samples++ {
		select {
		case <-deadline:
			b.Fatalf("backlog not drained after 30 minutes")
		case <-tick.C:
		}
		rss := residentKB(b, cmd.Process.Pid)
		peak = max(peak, rss)
		if samples%4 != 0 {
			continue
		}
		delivered := tb.Counts(b)[outbox.StatusDelivered]
		for len(quarters) < 4 && delivered >= (len(quarters)+1)*n/4 {
			quarters = append(quarters, rss)
		}
	}
	took := time.Since(began)
	b.StopTimer()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()

	b.ReportMetric(float64(peak)/1024, "peak-RSS-MB")
	b.ReportMetric(float64(n)/took.Seconds(), "events/s")
	b.ReportMetric(0, "ns/op")
	var readings []string
	for _, q := range quarters {
		readings = append(readings, fmt.Sprintf("%.0f MB", float64(q)/1024))
	}
	b.Logf("%d events of %d bytes into %s in %s; RSS at 25/50/75/100%%: %s; peak %.0f MB",
		n, size, publisherURL, took.Round(time.Second), strings.Join(readings, ", "), float64(peak)/1024)
}

// residentKB reads a process's resident set size from /proc.
func residentKB(b *testing.B, pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatalf("read RSS: %v", err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			return kb
		}
	}
	return 0
}
