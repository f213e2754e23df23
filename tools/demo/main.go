// Command demo shows the relay end to end on this machine: it migrates a
// table, creates a JetStream stream, starts bin/relay, writes sample events,
// waits for them to be delivered, prints the throughput, the status counts
// and three messages read back from the stream, and stops the relay. `make
// demo` builds the binaries and starts PostgreSQL and NATS first.
//
// Whatever happens — success, an error, Ctrl-C or SIGTERM — it stops the
// relay and drops the table (with its function) and the stream it made,
// unless -keep asks to leave them for a look around.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/relay/internal/redact"
	schema "github.com/outbox-relay/relay/schema/postgres"
)

// The demo's stream and the subjects it captures; every sample event type
// starts with demoPrefix.
const (
	streamName  = "DEMO"
	demoSubject = "demo.>"
	demoPrefix  = "demo."
)

// cleanupTimeout bounds the clean-up after the demo, which must not hang
// on a database or NATS that went away.
const cleanupTimeout = 15 * time.Second

func main() {
	var (
		storageURL = flag.String("storage-url", envOr("STORAGE_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"),
			"PostgreSQL URL (default: STORAGE_URL when set)")
		natsURL = flag.String("nats-url", envOr("PUBLISHER_URL", "nats://127.0.0.1:4222"), "NATS URL (default: PUBLISHER_URL when set)")
		events  = flag.Int("events", 10_000, "sample events to write")
		table   = flag.String("table", "outbox_demo", "outbox table for the demo (dropped at the end unless -keep)")
		bin     = flag.String("bin", "bin", "folder holding relay and relay-cli")
		keep    = flag.Bool("keep", false, "leave the table and the stream "+streamName+" behind for a look around")
	)
	flag.Parse()
	if !strings.HasPrefix(*natsURL, "nats://") && !strings.HasPrefix(*natsURL, "tls://") {
		fmt.Fprintf(os.Stderr, "demo: it publishes to NATS JetStream, and %s is not a nats:// URL; unset PUBLISHER_URL or pass -nats-url nats://host:4222\n", redact.URL(*natsURL))
		os.Exit(2)
	}
	fmt.Fprintf(os.Stderr, "demo: PostgreSQL at %s, NATS at %s\n", redact.URL(*storageURL), redact.URL(*natsURL))
	// The first Ctrl-C or SIGTERM ends the demo and lets it clean up;
	// further ones are swallowed until it has.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	d := &demo{storageURL: *storageURL, natsURL: *natsURL, table: *table, bin: *bin, keep: *keep}
	err := d.run(ctx, *events)
	d.cleanup()
	switch {
	case ctx.Err() != nil:
		fmt.Fprintln(os.Stderr, "demo: interrupted")
		os.Exit(130)
	case err != nil:
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func step(format string, args ...any) { fmt.Printf("==> "+format+"\n", args...) }

// demo holds what the run made, so that cleanup undoes exactly that.
type demo struct {
	storageURL, natsURL, table, bin string
	keep                            bool

	migrated bool          // the table is ours to drop
	nc       *natsgo.Conn  // set once connected
	stream   bool          // the stream is ours to delete
	relay    *relayProcess // set once started
}

// relayProcess is the running relay; done closes when it has exited.
type relayProcess struct {
	cmd     *exec.Cmd
	done    chan struct{}
	err     error // Wait's result, once done is closed
	stopped bool  // stop has run
	stopErr error // and returned this
}

func (d *demo) run(ctx context.Context, n int) error {
	tbl, err := schema.ParseTable(d.table)
	if err != nil {
		return fmt.Errorf("-table: %w", err)
	}
	db, err := pgx.Connect(ctx, d.storageURL)
	if err != nil {
		return err
	}
	defer db.Close(context.WithoutCancel(ctx))
	// The demo empties its table and drops it afterwards: never one that
	// holds anything but the demo's own events.
	var exists bool
	if err := db.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", tbl.Quoted()).Scan(&exists); err != nil {
		return err
	}
	if exists {
		var foreign int64
		err := db.QueryRow(ctx, "SELECT count(*) FROM "+tbl.Quoted()+" WHERE event_type NOT LIKE $1", demoPrefix+"%").Scan(&foreign)
		if err != nil {
			return fmt.Errorf("table %s exists and is not an outbox table; pass -table with another name: %w", d.table, err)
		}
		if foreign > 0 {
			return fmt.Errorf("table %s holds %d event(s) that are not the demo's; pass -table with another name", d.table, foreign)
		}
	}

	step("migrating table %s with relay-cli", d.table)
	migrate := exec.CommandContext(ctx, d.bin+"/relay-cli", "--storage-url", d.storageURL, "--table", d.table, "migrate")
	migrate.Stdout, migrate.Stderr = os.Stdout, os.Stderr
	d.migrated = true // even a migration that failed half-way may leave objects
	if err := migrate.Run(); err != nil {
		return fmt.Errorf("relay-cli migrate: %w", err)
	}
	if _, err := db.Exec(ctx, "TRUNCATE "+tbl.Quoted()); err != nil {
		return err
	}

	step("creating JetStream stream %s for subjects %s", streamName, demoSubject)
	if d.nc, err = natsgo.Connect(d.natsURL); err != nil {
		return err
	}
	js, err := jetstream.New(d.nc)
	if err != nil {
		return err
	}
	if s, err := js.Stream(ctx, streamName); err == nil {
		if subjects := s.CachedInfo().Config.Subjects; !slices.Equal(subjects, []string{demoSubject}) {
			return fmt.Errorf("a stream %s capturing %v exists, not the demo's; delete it or run the demo on another NATS", streamName, subjects)
		}
	} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("look up stream %s (is JetStream enabled on %s?): %w", streamName, d.natsURL, err)
	}
	// A stream left by an earlier run with -keep starts over.
	_ = js.DeleteStream(ctx, streamName)
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: streamName, Subjects: []string{demoSubject}})
	if err != nil {
		return fmt.Errorf("create stream (is JetStream enabled on %s?): %w", d.natsURL, err)
	}
	d.stream = true

	step("starting the relay (log in relay-demo.log)")
	logFile, err := os.Create("relay-demo.log")
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command(d.bin + "/relay")
	// PUBLISHER_URL is always explicit: the relay has no default broker.
	cmd.Env = append(os.Environ(),
		"STORAGE_URL="+d.storageURL, "STORAGE_TABLE_NAME="+d.table, "PUBLISHER_URL="+d.natsURL,
		"HTTP_ADDR=127.0.0.1:0", "LOG_FORMAT=text", "POLL_INTERVAL=100ms")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	ownProcessGroup(cmd)
	if err := cmd.Start(); err != nil {
		return err
	}
	d.relay = &relayProcess{cmd: cmd, done: make(chan struct{})}
	go func() {
		d.relay.err = cmd.Wait()
		close(d.relay.done)
	}()

	step("writing %d sample events (200-byte JSON payloads) in one transaction", n)
	rows := make([][]any, n)
	for i := range rows {
		kind := []string{"demo.order.created", "demo.order.paid", "demo.order.shipped"}[i%3]
		payload := fmt.Sprintf(`{"order":%d,"amount_cents":%d,"note":"%s"}`, i, 1000+i, strings.Repeat("x", 140))
		rows[i] = []any{uuid.Must(uuid.NewV7()), kind, fmt.Sprintf("customer-%d", i%100), []byte(payload),
			fmt.Sprintf(`{"source":"make-demo","n":%d}`, i)}
	}
	began := time.Now()
	if _, err := db.CopyFrom(ctx, pgx.Identifier(strings.Split(d.table, ".")),
		[]string{"event_id", "event_type", "partition_key", "payload", "headers"}, pgx.CopyFromRows(rows)); err != nil {
		return err
	}

	step("waiting until every event is delivered")
	for {
		var open int
		if err := db.QueryRow(ctx, "SELECT count(*) FROM "+tbl.Quoted()+" WHERE status IN ('PENDING','DELIVERING')").Scan(&open); err != nil {
			return err
		}
		if open == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-d.relay.done:
			d.relay.stopped = true // and reported here
			return fmt.Errorf("relay exited early (%v); see relay-demo.log", d.relay.err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Since(began) > 2*time.Minute {
			return fmt.Errorf("%d events still undelivered after 2 minutes; see relay-demo.log", open)
		}
	}
	took := time.Since(began)
	fmt.Printf("    delivered %d events in %s: %.0f events/s\n", n, took.Round(time.Millisecond), float64(n)/took.Seconds())

	step("status counts")
	counts, err := db.Query(ctx, "SELECT status, count(*) FROM "+tbl.Quoted()+" GROUP BY status ORDER BY status")
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

	step("three messages read back from stream %s", streamName)
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
	if err := d.stopRelay(); err != nil {
		return err
	}
	fmt.Println("    relay exited 0")
	return nil
}

// stopRelay sends SIGTERM and waits for the relay to exit, killing it if
// it takes longer than its shutdown should. Only the first call does it.
func (d *demo) stopRelay() error {
	if d.relay == nil || d.relay.stopped {
		return nil
	}
	d.relay.stopped = true
	d.relay.stopErr = d.relay.stop()
	return d.relay.stopErr
}

func (r *relayProcess) stop() error {
	select {
	case <-r.done:
	default:
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
		return fmt.Errorf("relay did not stop within 30s of SIGTERM; killed it")
	}
	if r.err != nil {
		return fmt.Errorf("relay exited with %v; see relay-demo.log", r.err)
	}
	return nil
}

// cleanup stops the relay, then drops the table and deletes the stream the
// run made, unless -keep; it reports what it could not undo and goes on.
func (d *demo) cleanup() {
	if err := d.stopRelay(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
	}
	defer func() {
		if d.nc != nil {
			d.nc.Close()
		}
	}()
	if d.keep {
		if d.migrated || d.stream {
			step("kept table %s and stream %s (-keep); the next run starts them over", d.table, streamName)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if d.stream {
		js, err := jetstream.New(d.nc)
		if err == nil {
			err = js.DeleteStream(ctx, streamName)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "demo: could not delete stream %s: %v\n", streamName, err)
		} else {
			step("deleted stream %s", streamName)
		}
	}
	if d.migrated {
		if err := dropTable(ctx, d.storageURL, d.table); err != nil {
			fmt.Fprintf(os.Stderr, "demo: could not drop table %s: %v\n", d.table, err)
		} else {
			step("dropped table %s", d.table)
		}
	}
}

// dropTable drops the table (its indexes, trigger and sequence go with it)
// and the notify function the schema made for it, on a connection of its
// own: the run's may have been closed by an interrupted query.
func dropTable(ctx context.Context, storageURL, table string) error {
	tbl, err := schema.ParseTable(table)
	if err != nil {
		return err
	}
	db, err := pgx.Connect(ctx, storageURL)
	if err != nil {
		return err
	}
	defer db.Close(ctx)
	_, err = db.Exec(ctx, "DROP TABLE IF EXISTS "+tbl.Quoted()+"; DROP FUNCTION IF EXISTS "+tbl.Object("notify")+"(), "+tbl.Object("writer")+"()")
	return err
}

// envOr is the environment variable name when it is set and not empty,
// else def: the demo connects where the relay would.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
