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
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/outbox-relay/relay/internal/buildinfo"
	"github.com/outbox-relay/relay/internal/logfmt"
	"github.com/outbox-relay/relay/internal/redact"
	_ "github.com/outbox-relay/relay/pkg/publisher/amqp"
	_ "github.com/outbox-relay/relay/pkg/publisher/kafka"
	_ "github.com/outbox-relay/relay/pkg/publisher/nats"
	_ "github.com/outbox-relay/relay/pkg/publisher/null"
	_ "github.com/outbox-relay/relay/pkg/publisher/redis"
	_ "github.com/outbox-relay/relay/pkg/publisher/stdout"
	_ "github.com/outbox-relay/relay/pkg/publisher/webhook"
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
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: logfmt.ReplaceAttr}
	if cfg.LogFormat == "text" {
		return slog.New(withLastLine(slog.NewTextHandler(w, opts)))
	}
	return slog.New(withLastLine(slog.NewJSONHandler(w, opts)))
}

func randomSuffix() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
