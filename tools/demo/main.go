// Command demo shows the relay end to end on this machine: it migrates a
// table, creates a JetStream stream, starts bin/relay, writes sample events,
// waits for them to be delivered, prints the throughput, the status counts
// and three messages read back from the stream, and stops the relay. `make
// demo` builds the binaries and starts PostgreSQL and NATS first.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func main() {
	var (
		storageURL = flag.String("storage-url", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "PostgreSQL URL")
		natsURL    = flag.String("nats-url", "nats://127.0.0.1:4222", "NATS URL")
		events     = flag.Int("events", 10_000, "sample events to write")
		table      = flag.String("table", "outbox_demo", "outbox table for the demo")
		bin        = flag.String("bin", "bin", "folder holding relay and relay-cli")
	)
	flag.Parse()
	if err := demo(*storageURL, *natsURL, *table, *bin, *events); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func step(format string, args ...any) { fmt.Printf("==> "+format+"\n", args...) }

func demo(storageURL, natsURL, table, bin string, n int) error {
	ctx := context.Background()

	step("migrating table %s with relay-cli", table)
	migrate := exec.Command(bin+"/relay-cli", "--storage-url", storageURL, "--table", table, "migrate")
	migrate.Stdout, migrate.Stderr = os.Stdout, os.Stderr
	if err := migrate.Run(); err != nil {
		return fmt.Errorf("relay-cli migrate: %w", err)
	}
	db, err := pgx.Connect(ctx, storageURL)
	if err != nil {
		return err
	}
	defer db.Close(ctx)
	if _, err := db.Exec(ctx, "TRUNCATE "+table); err != nil {
		return err
	}

	step("creating JetStream stream DEMO for subjects demo.>")
	nc, err := natsgo.Connect(natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	_ = js.DeleteStream(ctx, "DEMO")
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "DEMO", Subjects: []string{"demo.>"}})
	if err != nil {
		return fmt.Errorf("create stream (is JetStream enabled on %s?): %w", natsURL, err)
	}

	step("starting the relay (log in relay-demo.log)")
	logFile, err := os.Create("relay-demo.log")
	if err != nil {
		return err
	}
	defer logFile.Close()
	relay := exec.Command(bin + "/relay")
	relay.Env = append(os.Environ(),
		"STORAGE_URL="+storageURL, "STORAGE_TABLE_NAME="+table, "PUBLISHER_URL="+natsURL,
		"HTTP_ADDR=127.0.0.1:0", "LOG_FORMAT=text", "POLL_INTERVAL=100ms")
	relay.Stdout, relay.Stderr = logFile, logFile
	if err := relay.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- relay.Wait() }()
	// Whatever goes wrong below, no relay outlives the demo (killing one
	// that already exited does nothing).
	defer func() { _ = relay.Process.Kill() }()

	step("writing %d sample events (200-byte JSON payloads) in one transaction", n)
	rows := make([][]any, n)
	for i := range rows {
		kind := []string{"demo.order.created", "demo.order.paid", "demo.order.shipped"}[i%3]
		payload := fmt.Sprintf(`{"order":%d,"amount_cents":%d,"note":"%s"}`, i, 1000+i, strings.Repeat("x", 140))
		rows[i] = []any{uuid.Must(uuid.NewV7()), kind, fmt.Sprintf("customer-%d", i%100), []byte(payload),
			fmt.Sprintf(`{"source":"make-demo","n":%d}`, i)}
	}
	began := time.Now()
	if _, err := db.CopyFrom(ctx, pgx.Identifier(strings.Split(table, ".")),
		[]string{"event_id", "event_type", "partition_key", "payload", "headers"}, pgx.CopyFromRows(rows)); err != nil {
		return err
	}

	step("waiting until every event is delivered")
	for {
		var open int
		if err := db.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE status IN ('PENDING','DELIVERING')").Scan(&open); err != nil {
			return err
		}
		if open == 0 {
			break
		}
		select {
		case err := <-exited:
			return fmt.Errorf("relay exited early (%v); see relay-demo.log", err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Since(began) > 2*time.Minute {
			return fmt.Errorf("%d events still undelivered after 2 minutes; see relay-demo.log", open)
		}
	}
	took := time.Since(began)
	fmt.Printf("    delivered %d events in %s: %.0f events/s\n", n, took.Round(time.Millisecond), float64(n)/took.Seconds())

	step("status counts")
	counts, err := db.Query(ctx, "SELECT status, count(*) FROM "+table+" GROUP BY status ORDER BY status")
	if err != nil {
		return err
	}
	for counts.Next() {
		var status string
		var c int
		if err := counts.Scan(&status, &c); err != nil {
			return err
		}
		fmt.Printf("    %-10s %d\n", status, c)
	}
	if err := counts.Err(); err != nil {
		return err
	}

	step("three messages read back from stream DEMO")
	for seq := uint64(1); seq <= 3; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if err != nil {
			return err
		}
		fmt.Printf("    #%d %s\n", seq, m.Subject)
		for _, h := range []string{"Nats-Msg-Id", "X-Event-Type", "X-Partition-Key", "source"} {
			fmt.Printf("       %s: %s\n", h, m.Header.Get(h))
		}
		fmt.Printf("       payload: %s\n", m.Data)
	}

	step("stopping the relay with SIGTERM")
	_ = relay.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			return fmt.Errorf("relay exited with %v after SIGTERM", err)
		}
	case <-time.After(30 * time.Second):
		return fmt.Errorf("relay did not stop within 30s")
	}
	fmt.Println("    relay exited 0")
	return nil
}
