package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/relay/internal/harness/natstest"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/postgres"
	schema "github.com/outbox-relay/relay/schema/postgres"
)

var (
	cpuEvents    = flag.Int("cpu.events", 100_000, "backlog BenchmarkDrainCPU drains")
	cpuTableFrom = flag.String("cpu.table", "", "the table BenchmarkDrainCPU drains: this tree's (\"\"), \"upgraded\" (made by an earlier release, 2048ed7, then migrated by this tree: a rolling upgrade), or \"previous\" (the earlier release's, not migrated: only BENCH_RELAY_BINS run)")
)

// contender is a relay binary BenchmarkDrainCPU measures, and how it is
// told where to relay.
type contender struct {
	name string
	bin  string
	env  func(storageURL, table, publisherURL, httpAddr string) []string
	// nullOK says whether it has a null:// publisher.
	nullOK bool
}

func ourRelay(name, bin string) contender {
	return contender{name: name, bin: bin, nullOK: true, env: func(storageURL, table, publisherURL, httpAddr string) []string {
		return []string{"STORAGE_URL=" + storageURL, "STORAGE_TABLE_NAME=" + table, "PUBLISHER_URL=" + publisherURL,
			"HTTP_ADDR=" + httpAddr, "LOG_LEVEL=warn"}
	}}
}

// BenchmarkDrainCPU runs relay binaries, one after the other, over a backlog
// of -cpu.events 200-byte events into in-process JetStream and into
// null://, and reports for each the relay process's own CPU time per event
// (user + system, from /proc/<pid>/stat, counted from just before the
// events are inserted until the last is delivered) and its events/s.
//
// Contenders: this tree's relay; the binaries in BENCH_RELAY_BINS
// (comma-separated paths; build an earlier commit into one to compare
// side by side in the same run); and OPEN_OUTBOX_RELAY_BIN, Open Outbox
// Relay's binary, run with BATCH_SIZE=500 and POLL_INTERVAL=100ms (NATS
// only), whose rate is compared with ours.
func BenchmarkDrainCPU(b *testing.B) {
	var contenders []contender
	if *cpuTableFrom != "previous" {
		contenders = append(contenders, ourRelay("this tree", buildRelayBinary(b, false)))
	}
	for _, bin := range strings.Split(os.Getenv("BENCH_RELAY_BINS"), ",") {
		if bin != "" {
			contenders = append(contenders, ourRelay(filepath.Base(bin), bin))
		}
	}
	if bin := os.Getenv("OPEN_OUTBOX_RELAY_BIN"); bin != "" {
		contenders = append(contenders, contender{name: "Open Outbox Relay", bin: bin,
			env: func(storageURL, table, publisherURL, httpAddr string) []string {
				// It takes no schema-qualified table name: the schema
				// goes on the search path instead.
				schema, name, _ := strings.Cut(table, ".")
				return []string{"STORAGE_URL=" + storageURL + "&search_path=" + schema, "STORAGE_TABLE_NAME=" + name,
					"PUBLISHER_TYPE=nats", "PUBLISHER_URL=" + publisherURL, "SERVER_PORT=" + httpAddr,
					"BATCH_SIZE=500", "POLL_INTERVAL=100ms", "LOG_LEVEL=warn", "ENABLE_STATS=false"}
			}})
	}
	srv := natstest.Start(b)
	srv.Stream(b, jetstream.StreamConfig{Name: "CPU", Subjects: []string{"cpu.>"}, Storage: jetstream.MemoryStorage})

	b.ResetTimer()
	rates := map[string]float64{}
	for _, target := range []string{"nats", "null"} {
		for _, c := range contenders {
			if target == "null" && !c.nullOK {
				continue
			}
			publisherURL := "null://"
			if target == "nats" {
				publisherURL = srv.URL()
			}
			perEvent, rate := drainCPU(b, c, publisherURL, *cpuEvents)
			rates[c.name+" "+target] = rate
			b.Logf("%-20s into %-5s %6.2f µs CPU/event  %8.0f events/s", c.name, target, perEvent, rate)
			if c.name == "this tree" {
				b.ReportMetric(perEvent, "µs-cpu/event-"+target)
				b.ReportMetric(rate, "events/s-"+target)
			}
		}
	}
	if oo := rates["Open Outbox Relay nats"]; oo > 0 {
		b.Logf("this tree / Open Outbox Relay into NATS: %.1f×", rates["this tree nats"]/oo)
		b.ReportMetric(rates["this tree nats"]/oo, "×open-outbox")
	}
	b.ReportMetric(0, "ns/op")
}

// drainCPU runs one contender over a fresh table of n events and returns
// its CPU per event in µs and its rate.
func drainCPU(b *testing.B, c contender, publisherURL string, n int) (perEvent, rate float64) {
	tb := cpuTable(b)
	addr := freeAddr(b)
	cmd := exec.Command(c.bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Env = append(os.Environ(), c.env(pgtest.URL(), tb.Name, publisherURL, addr)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	waitHealthy(b, addr, &stderr)

	before := cpuTicks(b, cmd.Process.Pid)
	tb.InsertN(b, n, "cpu.event")
	began := time.Now()
	ctx := context.Background()
	// Fresh statistics, as autovacuum would gather after such an insert.
	// A PostgreSQL running without autovacuum (as CI machines may) plans
	// claims on a table it never analysed from default selectivities, and
	// may then sort every PENDING row on each claim: the contender would be
	// measured against the planner's guess instead of the relay's work.
	if _, err := tb.Pool().Exec(ctx, "ANALYZE "+tb.Name); err != nil {
		b.Fatal(err)
	}
	for {
		var delivered int
		if err := tb.Pool().QueryRow(ctx, "SELECT count(*) FROM "+tb.Name+" WHERE status = 'DELIVERED'").Scan(&delivered); err != nil {
			b.Fatal(err)
		}
		if delivered == n {
			break
		}
		if time.Since(began) > 10*time.Minute {
			b.Fatalf("%s: %d of %d delivered after 10 minutes; log:\n%s", c.name, delivered, n, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(began)
	ticks := cpuTicks(b, cmd.Process.Pid) - before
	// /proc counts in clock ticks of 10 ms (USER_HZ = 100 on Linux).
	return float64(ticks) * 10_000 / float64(n), float64(n) / took.Seconds()
}

func waitHealthy(b *testing.B, addr string, log *strings.Builder) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.Fatalf("relay not healthy on %s within 30s; log:\n%s", addr, log.String())
}

// cpuTicks reads a process's user + system time, in clock ticks.
func cpuTicks(b *testing.B, pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatalf("read CPU time: %v", err)
	}
	// The command name, in parentheses, may hold spaces: count fields
	// after its closing parenthesis. utime and stime are fields 14 and 15.
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return utime + stime
}

// cpuTable is the outbox table for one drain (-cpu.table): this tree's;
// or made by an earlier release's schema and then migrated by this tree,
// as in a rolling upgrade (the earlier release's indexes stay); or the
// earlier release's as it made it.
func cpuTable(b *testing.B) *pgtest.Table {
	if *cpuTableFrom == "" {
		return pgtest.New(b)
	}
	ctx := context.Background()
	name := pgtest.NewSchema(b) + ".openoutbox_events"
	tbl, err := schema.ParseTable(name)
	if err != nil {
		b.Fatal(err)
	}
	ddl, err := os.ReadFile("../../pkg/storage/postgres/testdata/schema_2048ed7.sql")
	if err != nil {
		b.Fatal(err)
	}
	storeURL := storage.URLWithTable(pgtest.URL(), name)
	store, err := postgres.Open(ctx, storeURL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(store.Close)
	conn, err := pgx.Connect(ctx, store.ConnString())
	if err != nil {
		b.Fatal(err)
	}
	_, err = conn.Exec(ctx, schema.Expand(string(ddl), tbl), pgx.QueryExecModeSimpleProtocol)
	conn.Close(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if *cpuTableFrom == "upgraded" {
		if _, err := store.Migrate(ctx, storage.MigrateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	return pgtest.Of(b, store, storeURL, name)
}
