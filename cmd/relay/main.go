// Command relay moves events from a PostgreSQL or MySQL outbox table to a
// message broker. It is configured entirely from the environment; see
// docs/configuration.md.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/outbox-relay/relay/internal/buildinfo"
	"github.com/outbox-relay/relay/internal/reaper"
	"github.com/outbox-relay/relay/internal/redact"
	"github.com/outbox-relay/relay/internal/retention"
	"github.com/outbox-relay/relay/internal/telemetry"
	"github.com/outbox-relay/relay/pkg/publisher"
	_ "github.com/outbox-relay/relay/pkg/publisher/amqp"
	_ "github.com/outbox-relay/relay/pkg/publisher/kafka"
	_ "github.com/outbox-relay/relay/pkg/publisher/nats"
	_ "github.com/outbox-relay/relay/pkg/publisher/null"
	_ "github.com/outbox-relay/relay/pkg/publisher/redis"
	_ "github.com/outbox-relay/relay/pkg/publisher/stdout"
	_ "github.com/outbox-relay/relay/pkg/publisher/webhook"
	"github.com/outbox-relay/relay/pkg/relay"
	"github.com/outbox-relay/relay/pkg/storage"
	_ "github.com/outbox-relay/relay/pkg/storage/mysql"
	_ "github.com/outbox-relay/relay/pkg/storage/postgres"
)

// version and commit are set at build time with -ldflags "-X
// main.version=... -X main.commit=..." (make build, the image); without
// them the version reads "dev" and the commit is what Go recorded.
var version, commit = "dev", ""

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal, a second one kills the process outright.
		<-ctx.Done()
		stop()
	}()
	os.Exit(run(ctx, os.Args[1:], environ(), os.Stdout, os.Stderr))
}

func environ() map[string]string {
	m := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

const usage = `Usage: relay [--version | --help | healthcheck]

The relay is configured from the environment (STORAGE_URL, PUBLISHER_URL,
BATCH_SIZE, ...); see docs/configuration.md. It runs until SIGINT or SIGTERM,
then finishes the batches in flight and exits 0.

relay healthcheck reads the same environment, asks the relay it configures
(HTTP_ADDR, or SERVER_PORT) for /healthz and exits 0 when it answers 200, for
container health checks in images without curl.
`

// run is the whole program; it returns the exit code: 0 after a clean stop,
// 1 when something failed at run time, 2 for a configuration mistake.
func run(ctx context.Context, args []string, environ map[string]string, stdout, stderr io.Writer) int {
	if len(args) == 1 && args[0] == "healthcheck" {
		return healthcheck(ctx, environ, stderr)
	}
	for _, a := range args {
		switch a {
		case "--version", "-version", "version":
			fmt.Fprintf(stdout, "relay %s\n", buildinfo.Describe(version, commit))
			return 0
		case "--help", "-help", "-h", "help":
			fmt.Fprint(stdout, usage)
			return 0
		default:
			fmt.Fprintf(stderr, "relay: unknown argument %q\n%s", a, usage)
			return 2
		}
	}
	cfg, err := loadConfig(environ)
	if err != nil {
		printConfigError(stderr, "relay", err)
		// PUBLISHER_URLL leaves PUBLISHER_URL unset: say which was meant.
		for _, w := range envSlipWarnings(environ) {
			fmt.Fprintf(stderr, "  %s\n", w)
		}
		return 2
	}
	log := newLogger(cfg, stderr)
	gogc, memLimit := tuneGC(environ)
	log.Debug("garbage collector", "gogc", gogc, "gomemlimit", memLimit)
	for _, note := range cfg.notes {
		log.Info("Open Outbox setting: " + note)
	}
	for _, w := range envSlipWarnings(environ) {
		log.Warn(w)
	}
	if err := serve(ctx, cfg, log); err != nil {
		log.ErrorContext(asLastLine(context.Background()), "relay stopped with an error", "error", redact.URL(err.Error()))
		var ue usageError
		if errors.As(err, &ue) {
			return 2
		}
		return 1
	}
	return 0
}

// printConfigError writes loadConfig's error, one problem a line, without
// secrets.
func printConfigError(w io.Writer, prefix string, err error) {
	fmt.Fprintf(w, "%s: configuration error:\n  %s\n", prefix,
		strings.ReplaceAll(redact.URL(err.Error()), "\n", "\n  "))
}

func newLogger(cfg config, w io.Writer) *slog.Logger {
	level, _ := parseLevel(cfg.LogLevel)
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "text" {
		return slog.New(withLastLine(slog.NewTextHandler(w, opts)))
	}
	return slog.New(withLastLine(slog.NewJSONHandler(w, opts)))
}

// serve wires the relay together and runs it until ctx ends. It returns
// within SHUTDOWN_TIMEOUT of ctx's end, having closed what it opened and
// written the relay's last log line, unless it returns an error, which the
// caller logs last.
func serve(ctx context.Context, cfg config, log *slog.Logger) (err error) {
	sd := newShutdown(ctx, cfg.ShutdownTimeout, log)
	defer func() {
		sd.close()
		if err == nil {
			log.InfoContext(asLastLine(context.Background()), sd.last)
		}
	}()
	store, err := storage.Open(ctx, storage.URLWithTable(cfg.StorageURL, cfg.StorageTableName))
	if err != nil {
		return usageError{fmt.Errorf("STORAGE_URL: %w", err)}
	}
	// Storage.Close takes no context; the shutdown stops waiting for it at
	// the deadline.
	closeStore := sd.add("the database pool", func(context.Context) error { store.Close(); return nil })
	if cfg.storageURLDefaulted {
		log.Warn("STORAGE_URL is not set: using the default " + redact.URL(storage.URLDefault) + "; set STORAGE_URL to the database that holds your outbox table")
	}
	// Said before the first query, which waits for the database: a relay
	// that hangs here shows where it hangs.
	log.Info("connecting to " + store.Describe())
	notifier, canNotify := store.(storage.Notifier)
	wakeup := cfg.Wakeup
	switch {
	case cfg.Capture == captureWAL:
		// The log brings new events; claims only look for events due
		// again, every POLL_INTERVAL.
		wakeup = wakeupPoll
	case wakeup == wakeupNotify && !canNotify:
		return usageError{fmt.Errorf("WAKEUP=notify: this storage cannot notify the relay of inserts; unset WAKEUP or set WAKEUP=poll (new events are then found every POLL_INTERVAL, %s)", cfg.PollInterval)}
	case wakeup == "" && canNotify:
		wakeup = wakeupNotify
	case wakeup == "":
		wakeup = wakeupPoll
		log.Info("this storage cannot notify the relay of inserts: polling for new events", "poll_interval", cfg.PollInterval)
	}

	// Drivers connect in the background, so opening the publisher finds
	// mistakes in its URL without waiting for the broker. A variable its
	// URL names (secret_env) is looked up in the relay's environment.
	lookup := func(name string) (string, bool) { v, ok := cfg.environ[name]; return v, ok }
	// The table names the events' origin (format=cloudevents's source).
	pub, err := publisher.Open(publisher.WithTable(publisher.WithEnv(ctx, lookup), store.Table()), cfg.PublisherURL)
	if err != nil {
		return usageError{fmt.Errorf("PUBLISHER_URL: %w", err)}
	}
	sd.add("the publisher", pub.Close)

	if cfg.AutoMigrate {
		res, err := store.Migrate(ctx, storage.MigrateOptions{Progress: func(msg string) { log.Info("migrating", "step", msg) }})
		if err != nil {
			return sd.startError(ctx, err)
		}
		log.Info("schema migrated", "created", res.Created, "existed", len(res.Existed), "dropped", res.Dropped, "kept_for_cleanup", res.Kept)
	}
	if err := store.Check(ctx); err != nil {
		return sd.startError(ctx, err)
	}
	if cfg.retentionConfig(nil).Enabled() {
		if err := canDelete(ctx, store); err != nil {
			return sd.startError(ctx, err)
		}
	}

	tel, err := telemetry.New(ctx, cfg.telemetryConfig(log))
	if err != nil {
		return sd.startError(ctx, err)
	}
	// Runs after the engine and reaper stopped: what they recorded last is
	// flushed to OTLP or the console before the process exits.
	closeTelemetry := sd.add("telemetry", tel.Shutdown)
	closeStore.runsAfter(closeTelemetry)

	// The relay's components, one step each. Each logs through log and
	// reports its work to an observer of its own, which internal/telemetry
	// implements in the file named for it (engine.go, capture.go,
	// reaper.go, retention.go; backlog.go polls for the backlog gauges).

	// The engine: claim, publish, settle.
	engineCfg := cfg.engineConfig(log)
	engineCfg.Observer = tel.EngineObserver()
	engine, err := relay.New(engineCfg, store, pub)
	if err != nil {
		return usageError{explainFieldErrors(err)}
	}
	// CAPTURE=wal: the log reader beside the engine's claims.
	var capt *relay.Capture
	if cfg.Capture == captureWAL {
		wal, err := openWAL(ctx, cfg, store, log)
		if err != nil {
			return sd.startError(ctx, err)
		}
		obs, err := tel.CaptureObserver(wal.retained, log)
		if err != nil {
			return sd.startError(ctx, err)
		}
		if capt, err = relay.NewCapture(engine, wal.source, wal.recorder, relay.CaptureConfig{Observer: obs}); err != nil {
			return sd.startError(ctx, usageError{explainFieldErrors(err)})
		}
	}
	// The reaper: expired leases back to PENDING.
	reaperCfg := cfg.reaperConfig(log)
	reaperCfg.Observer = tel.ReaperObserver()
	rp, err := reaper.New(reaperCfg, store)
	if err != nil {
		return usageError{err}
	}
	// The backlog gauges and /stats: a poller inside telemetry.
	backlog := tel.PollBacklog(store, log)
	// Retention: DELIVERED_RETENTION, DEAD_RETENTION, partitions.
	retentionCfg := cfg.retentionConfig(log)
	retentionCfg.Observer = tel.RetentionObserver()
	var retainer *retention.Runner
	if retention.Needed(retentionCfg, store) {
		if retainer, err = retention.New(retentionCfg, store); err != nil {
			return usageError{err}
		}
	}
	for _, note := range cfg.retentionNotes() {
		log.Warn(note)
	}

	health := &healthState{}
	ready := newReadiness(store, pub, engine, health)
	if capt != nil {
		ready.capture = capt
	}
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return listenError(cfg.HTTPAddr, err)
	}
	srv := newHTTPServer(httpDeps{
		health:      health,
		ready:       ready,
		metrics:     tel.MetricsHandler(),
		metricsNote: "OTEL_METRICS_EXPORTER=" + cfg.MetricsExporter,
		backlog:     backlog,
	})
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("HTTP server failed", "error", err)
		}
	}()
	// Readiness queries the database: the pool closes after the server.
	closeStore.runsAfter(sd.add("the HTTP server", func(ctx context.Context) error {
		if err := srv.Shutdown(ctx); err != nil {
			// Requests still open at the deadline (a long scrape) are cut.
			_ = srv.Close()
			return fmt.Errorf("HTTP server: %w", err)
		}
		return nil
	}))

	log.Info("relay started",
		"version", buildinfo.Describe(version, commit),
		"relay_id", cfg.RelayID,
		"storage", redact.URL(cfg.StorageURL),
		"table", store.Table(),
		"publisher", publisher.Redact(cfg.PublisherURL),
		"http", ln.Addr().String(),
		"batch_size", cfg.BatchSize,
		"max_batch_bytes", cfg.MaxBatchBytes.String(),
		"max_in_flight_batches", cfg.MaxInFlightBatches,
		"wakeup", wakeup,
		"capture", cfg.Capture,
		"ordering", cfg.Ordering,
		"delivered_retention", cfg.DeliveredRetention.String(),
		"dead_retention", cfg.DeadRetention.String(),
		"metrics_exporter", cfg.MetricsExporter,
		"traces_exporter", cfg.TracesExporter)

	// The relay's parts run until the signal, or until the WAL reader
	// finds the database can no longer serve it (a setting changed).
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	captureErr := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		engine.Run(runCtx)
	}()
	if capt != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := capt.Run(runCtx); err != nil {
				captureErr <- err
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		rp.Run(runCtx)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		backlog.Run(runCtx)
	}()
	if retainer != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			retainer.Run(runCtx)
		}()
	}
	if wakeup == wakeupNotify {
		wg.Add(1)
		go func() {
			defer wg.Done()
			engine.Listen(runCtx, notifier)
		}()
	}
	health.setRunning(true)
	var runErr error
	select {
	case <-ctx.Done():
	case err := <-captureErr:
		runErr = usageError{fmt.Errorf("CAPTURE=wal: %w", err)}
		sd.start()
		stopRun()
	}
	stopped := make(chan struct{})
	go func() {
		wg.Wait()
		close(stopped)
	}()
	// The engine returns within its share of SHUTDOWN_TIMEOUT when every
	// storage call ends when its context does. One that does not (handing
	// back the rows of a claim cut off mid-read waits for the database on
	// its own timer) must not eat the closing steps' share: they start
	// anyway, and closing the pool ends such a call.
	timer := time.NewTimer(time.Until(sd.engineDeadline()))
	defer timer.Stop()
	select {
	case <-stopped:
	case <-timer.C:
		log.Warn("relaying did not stop in its share of SHUTDOWN_TIMEOUT; closing anyway; rows still held stay DELIVERING until the reaper takes them back",
			"timeout", cfg.ShutdownTimeout)
	}
	health.setRunning(false)
	return runErr
}

// startError is err from a start-up step, or nil when ctx ended meanwhile:
// SIGTERM while the relay still waits for the database is a clean stop
// (exit 0, no error logged), or every rolling deploy that catches a relay
// starting would look like a crash.
func (s *shutdown) startError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		s.last = "relay stopped before it started"
		return nil
	}
	return err
}

func randomSuffix() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// listenError explains why the relay could not listen on HTTP_ADDR, where
// it serves /healthz, /readyz and /metrics: another relay on the same host
// (or any other program) may hold the port.
func listenError(addr string, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		_, port, _ := net.SplitHostPort(addr)
		next := "8081"
		if n, perr := strconv.Atoi(port); perr == nil && n > 0 && n < 65535 {
			next = strconv.Itoa(n + 1)
		}
		return fmt.Errorf("HTTP_ADDR %s is taken (another relay on this host, or another program: `ss -ltnp` shows which); "+
			"the relay serves /healthz, /readyz and /metrics there: set HTTP_ADDR to a free port, such as HTTP_ADDR=:%s, "+
			"or 127.0.0.1:%s to listen on this host only: %w", addr, next, next, err)
	}
	return fmt.Errorf("HTTP_ADDR %s: %w", addr, err)
}
