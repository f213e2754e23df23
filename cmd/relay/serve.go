package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/outbox-relay/relay/internal/buildinfo"
	"github.com/outbox-relay/relay/internal/listen"
	"github.com/outbox-relay/relay/internal/redact"
	"github.com/outbox-relay/relay/internal/retention"
	"github.com/outbox-relay/relay/internal/telemetry"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/reaper"
	"github.com/outbox-relay/relay/pkg/relay"
	"github.com/outbox-relay/relay/pkg/storage"
)

// serve wires the relay together and runs it until ctx ends. It returns
// within SHUTDOWN_TIMEOUT of ctx's end, having closed what it opened and
// written the relay's last log line, unless it returns an error, which the
// caller logs last.
//
// Each step registers what it opens with sd as it opens it, so whichever
// step fails, the deferred sd.close closes everything opened before it.
func serve(ctx context.Context, cfg config, log *slog.Logger) (err error) {
	sd := newShutdown(ctx, cfg.ShutdownTimeout, log)
	defer func() {
		sd.close()
		if err == nil {
			log.InfoContext(asLastLine(context.Background()), sd.last)
		}
	}()
	store, closeStore, err := openStorage(ctx, cfg, sd, log)
	if err != nil {
		return err
	}
	wakeup, err := chooseWakeup(cfg, store, log)
	if err != nil {
		return err
	}
	pub, err := openPublisher(ctx, cfg, store, sd)
	if err != nil {
		return err
	}
	if err := prepareStorage(ctx, cfg, store, log); err != nil {
		return sd.startError(ctx, err)
	}
	tel, err := startTelemetry(ctx, cfg, sd, closeStore, log)
	if err != nil {
		return sd.startError(ctx, err)
	}
	parts, err := newRelayParts(ctx, cfg, sd, store, pub, tel, wakeup, log)
	if err != nil {
		return err
	}
	health, httpAddr, err := startHTTP(cfg, sd, closeStore, store, pub, tel, parts, log)
	if err != nil {
		return err
	}
	logStarted(cfg, store.Table(), httpAddr, wakeup, log)
	return runUntilStopped(ctx, cfg, sd, parts, health, log)
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

// openStorage opens the database pool STORAGE_URL names and registers its
// closing; the returned step is the pool's, which the later steps make wait
// for what still queries the database.
func openStorage(ctx context.Context, cfg config, sd *shutdown, log *slog.Logger) (storage.Storage, *closeStep, error) {
	store, err := storage.Open(ctx, storage.URLWithTable(cfg.StorageURL, cfg.StorageTableName))
	if err != nil {
		return nil, nil, usageError{fmt.Errorf("STORAGE_URL: %w", err)}
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
	return store, closeStore, nil
}

// chooseWakeup decides how the engine learns of new events (WAKEUP): told
// by the storage on insert (wakeupNotify) or by polling (wakeupPoll).
func chooseWakeup(cfg config, store storage.Storage, log *slog.Logger) (string, error) {
	_, canNotify := store.(storage.Notifier)
	wakeup := cfg.Wakeup
	switch {
	case cfg.Capture == captureWAL || cfg.Capture == captureBinlog:
		// The log brings new events; claims only look for events due
		// again, every POLL_INTERVAL.
		wakeup = wakeupPoll
	case wakeup == wakeupNotify && !canNotify:
		return "", usageError{fmt.Errorf("WAKEUP=notify: this storage cannot notify the relay of inserts; unset WAKEUP or set WAKEUP=poll (new events are then found every POLL_INTERVAL, %s)", cfg.PollInterval)}
	case wakeup == "" && canNotify:
		wakeup = wakeupNotify
	case wakeup == "":
		wakeup = wakeupPoll
		log.Info("this storage cannot notify the relay of inserts: polling for new events", "poll_interval", cfg.PollInterval)
	}
	return wakeup, nil
}

// openPublisher opens the broker client PUBLISHER_URL names and registers
// its closing.
func openPublisher(ctx context.Context, cfg config, store storage.Storage, sd *shutdown) (publisher.Publisher, error) {
	// Drivers connect in the background, so opening the publisher finds
	// mistakes in its URL without waiting for the broker. A variable its
	// URL names (secret_env) is looked up in the relay's environment.
	lookup := func(name string) (string, bool) { v, ok := cfg.environ[name]; return v, ok }
	// The table names the events' origin (format=cloudevents's source).
	pub, err := publisher.Open(publisher.WithTable(publisher.WithEnv(ctx, lookup), store.Table()), cfg.PublisherURL)
	if err != nil {
		return nil, usageError{fmt.Errorf("PUBLISHER_URL: %w", err)}
	}
	sd.add("the publisher", pub.Close)
	return pub, nil
}

// prepareStorage migrates the schema when STORAGE_AUTO_MIGRATE asks for it,
// checks that the table is usable and, when retention is on, that the
// relay may delete from it.
func prepareStorage(ctx context.Context, cfg config, store storage.Storage, log *slog.Logger) error {
	if cfg.AutoMigrate {
		res, err := store.Migrate(ctx, storage.MigrateOptions{Progress: func(msg string) { log.Info("migrating", "step", msg) }})
		if err != nil {
			return err
		}
		log.Info("schema migrated", "created", res.Created, "existed", len(res.Existed), "dropped", res.Dropped, "kept_for_cleanup", res.Kept)
	}
	if err := store.Check(ctx); err != nil {
		return err
	}
	if cfg.retentionConfig(nil).Enabled() {
		if err := canDelete(ctx, store); err != nil {
			return err
		}
	}
	return nil
}

// startTelemetry starts the metrics and traces the OTEL_ settings ask for
// and registers their flush, which the database pool's closing waits for.
func startTelemetry(ctx context.Context, cfg config, sd *shutdown, closeStore *closeStep, log *slog.Logger) (*telemetry.Telemetry, error) {
	tel, err := telemetry.New(ctx, cfg.telemetryConfig(log))
	if err != nil {
		return nil, err
	}
	// Runs after the engine and reaper stopped: what they recorded last is
	// flushed to OTLP or the console before the process exits.
	closeTelemetry := sd.add("telemetry", tel.Shutdown)
	closeStore.runsAfter(closeTelemetry)
	return tel, nil
}

// relayParts are the relay's components, which run from relayParts.start
// until the relay stops.
type relayParts struct {
	engine *relay.Engine
	// capture is the WAL reader under CAPTURE=wal, nil when polling.
	capture *relay.Capture
	reaper  *reaper.Reaper
	backlog *telemetry.BacklogPoller
	// retainer is nil when retention has nothing to do.
	retainer *retention.Runner
	// wakeup is chooseWakeup's choice; under wakeupNotify the engine
	// listens to notifier.
	wakeup   string
	notifier storage.Notifier
	// claimBound is the storage's claim bound, nil when it does not say.
	claimBound *storage.ClaimBound
}

// newRelayParts builds the relay's components, one step each. Each logs
// through log and reports its work to an observer of its own, which
// internal/telemetry implements in the file named for it (engine.go,
// capture.go, reaper.go, retention.go; backlog.go polls for the backlog
// gauges).
func newRelayParts(ctx context.Context, cfg config, sd *shutdown, store storage.Storage, pub publisher.Publisher, tel *telemetry.Telemetry, wakeup string, log *slog.Logger) (relayParts, error) {
	engine, err := newEngine(cfg, store, pub, tel, log)
	if err != nil {
		return relayParts{}, err
	}
	capt, err := openCapture(ctx, cfg, store, engine, tel, log)
	if err != nil {
		return relayParts{}, sd.startError(ctx, err)
	}
	rp, err := newReaper(cfg, store, tel, log)
	if err != nil {
		return relayParts{}, err
	}
	// The backlog gauges and /stats: a poller inside telemetry.
	backlog := tel.PollBacklog(store, log)
	retainer, err := newRetainer(cfg, store, tel, log)
	if err != nil {
		return relayParts{}, err
	}
	notifier, _ := store.(storage.Notifier)
	return relayParts{
		claimBound: claimBound(cfg, store, log),
		engine:     engine,
		capture:    capt,
		reaper:     rp,
		backlog:    backlog,
		retainer:   retainer,
		wakeup:     wakeup,
		notifier:   notifier,
	}, nil
}

// claimBound asks the storage how late its claims may find a committed
// event, at the relay's SWEEP_INTERVAL, and warns when the bound is a timing
// one (MySQL and MariaDB polling): users must know that a late commit's
// event waits for a sweep. Nil when the storage does not say.
func claimBound(cfg config, store storage.Storage, log *slog.Logger) *storage.ClaimBound {
	cb, ok := store.(storage.ClaimBounder)
	if !ok {
		return nil
	}
	b := cb.ClaimBound(cfg.SweepInterval)
	if !b.Exact && cfg.Capture != capturePoll {
		// The log brings every new event in commit order; the claims'
		// bound holds only while no relay streams it, which /readyz
		// reports (storage.ClaimBound.BesideLog).
		log.Info("new events come from the log in commit order; while no relay streams it, the claims take them, and those of late commits wait up to SWEEP_INTERVAL",
			"sweep_interval", cfg.SweepInterval.String())
		return &b
	}
	if !b.Exact {
		log.Warn(fmt.Sprintf("events of transactions that commit late wait up to SWEEP_INTERVAL (%s) plus one claim (%s); to remove the wait, %s",
			b.LateCommitWait, b.Why, b.Fix), "late_commit_wait", b.LateCommitWait.String())
	}
	return &b
}

// newEngine builds the engine: claim, publish, settle.
func newEngine(cfg config, store storage.Storage, pub publisher.Publisher, tel *telemetry.Telemetry, log *slog.Logger) (*relay.Engine, error) {
	engineCfg := cfg.engineConfig(log)
	engineCfg.Observer = tel.EngineObserver()
	engine, err := relay.New(engineCfg, store, pub)
	if err != nil {
		return nil, usageError{explainFieldErrors(err)}
	}
	return engine, nil
}

// openCapture sets up CAPTURE=wal: the log reader beside the engine's
// claims. It returns nil when the relay does not read the log.
func openCapture(ctx context.Context, cfg config, store storage.Storage, engine *relay.Engine, tel *telemetry.Telemetry, log *slog.Logger) (*relay.Capture, error) {
	var (
		wal walCapture
		err error
	)
	switch cfg.Capture {
	case captureWAL:
		wal, err = openWAL(ctx, cfg, store, log)
	case captureBinlog:
		wal, err = openBinlog(ctx, cfg, store, log)
	default:
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	obs, err := tel.CaptureObserver(wal.retained, log)
	if err != nil {
		return nil, err
	}
	capt, err := relay.NewCapture(engine, wal.source, wal.recorder, relay.CaptureConfig{Observer: obs, Mode: cfg.Capture, Position: wal.position})
	if err != nil {
		return nil, usageError{explainFieldErrors(err)}
	}
	return capt, nil
}

// newReaper builds the reaper: expired leases back to PENDING.
func newReaper(cfg config, store storage.Storage, tel *telemetry.Telemetry, log *slog.Logger) (*reaper.Reaper, error) {
	reaperCfg := cfg.reaperConfig(log)
	reaperCfg.Observer = tel.ReaperObserver()
	rp, err := reaper.New(reaperCfg, store)
	if err != nil {
		return nil, usageError{err}
	}
	return rp, nil
}

// newRetainer builds retention (DELIVERED_RETENTION, DEAD_RETENTION,
// partitions), nil when it has nothing to do, and warns of retention
// settings that may surprise.
func newRetainer(cfg config, store storage.Storage, tel *telemetry.Telemetry, log *slog.Logger) (*retention.Runner, error) {
	retentionCfg := cfg.retentionConfig(log)
	retentionCfg.Observer = tel.RetentionObserver()
	var retainer *retention.Runner
	if retention.Needed(retentionCfg, store) {
		var err error
		if retainer, err = retention.New(retentionCfg, store); err != nil {
			return nil, usageError{err}
		}
	}
	for _, note := range cfg.retentionNotes() {
		log.Warn(note)
	}
	return retainer, nil
}

// startHTTP serves /healthz, /readyz, /metrics and /stats on HTTP_ADDR and
// registers the server's closing, which the database pool's closing waits
// for. It returns the liveness state and the address it listens on.
func startHTTP(cfg config, sd *shutdown, closeStore *closeStep, store storage.Storage, pub publisher.Publisher, tel *telemetry.Telemetry, parts relayParts, log *slog.Logger) (*healthState, string, error) {
	health := &healthState{}
	ready := newReadiness(store, pub, parts.engine, health)
	if parts.capture != nil {
		ready.capture = parts.capture
	}
	ready.claimBound = parts.claimBound
	ready.captureMode = cfg.Capture
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return nil, "", listenError(cfg.HTTPAddr, err)
	}
	srv := newHTTPServer(httpDeps{
		health:      health,
		ready:       ready,
		metrics:     tel.MetricsHandler(),
		metricsNote: "OTEL_METRICS_EXPORTER=" + cfg.MetricsExporter,
		backlog:     parts.backlog,
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
	return health, ln.Addr().String(), nil
}

// listenError explains why the relay could not listen on HTTP_ADDR, where
// it serves /healthz, /readyz and /metrics: another relay on the same host
// (or any other program) may hold the port.
func listenError(addr string, err error) error {
	return listen.Error(addr, err, listen.Taken{
		Setting: "HTTP_ADDR",
		Holder:  "another relay on this host",
		Serves:  "the relay serves /healthz, /readyz and /metrics there",
		Fix: func(next string) string {
			return fmt.Sprintf("set HTTP_ADDR to a free port, such as HTTP_ADDR=:%s, or 127.0.0.1:%s to listen on this host only", next, next)
		},
		Fallback: "8081",
	})
}

// logStarted writes the "relay started" line with the settings in effect.
func logStarted(cfg config, table, httpAddr, wakeup string, log *slog.Logger) {
	log.Info("relay started",
		"version", buildinfo.Describe(version, commit),
		"relay_id", cfg.RelayID,
		"storage", redact.URL(cfg.StorageURL),
		"table", table,
		"publisher", publisher.Redact(cfg.PublisherURL),
		"http", httpAddr,
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
}

// runUntilStopped runs the relay's parts, with /healthz saying so, until
// ctx ends or the WAL reader fails, then waits for them to stop within
// their share of SHUTDOWN_TIMEOUT. It returns the WAL reader's error.
func runUntilStopped(ctx context.Context, cfg config, sd *shutdown, parts relayParts, health *healthState, log *slog.Logger) error {
	// The relay's parts run until the signal, or until the WAL reader
	// finds the database can no longer serve it (a setting changed).
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	running, captureErr := parts.start(runCtx)
	health.setRunning(true)
	var runErr error
	select {
	case <-ctx.Done():
	case err := <-captureErr:
		runErr = usageError{fmt.Errorf("CAPTURE=wal: %w", err)}
		sd.start()
		stopRun()
	}
	waitForParts(running, sd, cfg.ShutdownTimeout, log)
	health.setRunning(false)
	return runErr
}

// start runs each part in a goroutine of its own until ctx ends. running
// is done when all have returned; captureErr receives the WAL reader's
// error, if it stops with one.
func (p relayParts) start(ctx context.Context) (running *sync.WaitGroup, captureErr <-chan error) {
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.engine.Run(ctx)
	}()
	if p.capture != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.capture.Run(ctx); err != nil {
				errs <- err
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.reaper.Run(ctx)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.backlog.Run(ctx)
	}()
	if p.retainer != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.retainer.Run(ctx)
		}()
	}
	if p.wakeup == wakeupNotify {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.engine.Listen(ctx, p.notifier)
		}()
	}
	return &wg, errs
}

// waitForParts waits for the parts counted by running to return, but no
// later than the end of the engine's share of SHUTDOWN_TIMEOUT.
func waitForParts(running *sync.WaitGroup, sd *shutdown, timeout time.Duration, log *slog.Logger) {
	stopped := make(chan struct{})
	go func() {
		running.Wait()
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
			"timeout", timeout)
	}
}
