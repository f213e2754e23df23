// Command embedded shows how a Go program embeds the relay instead of
// running the relay command: it opens a storage and a publisher by URL,
// runs the engine (pkg/relay) with status leases, and runs a reaper
// (pkg/reaper) beside it, on the same storage and with the engine's lease
// timeout and attempt limit, so that the leases of a copy of it that died
// are taken back. It stops on SIGINT or SIGTERM. Run it against a migrated
// table:
//
//	bin/relay-cli migrate
//	go run ./examples/embedded -storage "$STORAGE_URL" -publisher stdout://
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/reaper"
	"github.com/outbox-relay/relay/pkg/relay"
	"github.com/outbox-relay/relay/pkg/storage"

	// The drivers register themselves for their URL schemes.
	_ "github.com/outbox-relay/relay/pkg/publisher/nats"
	_ "github.com/outbox-relay/relay/pkg/publisher/stdout"
	_ "github.com/outbox-relay/relay/pkg/storage/mysql"
	_ "github.com/outbox-relay/relay/pkg/storage/postgres"
)

func main() {
	storageURL := flag.String("storage", os.Getenv("STORAGE_URL"), "storage URL (postgres://… or mysql://…)")
	publisherURL := flag.String("publisher", envOr("PUBLISHER_URL", "stdout://"), "publisher URL")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *storageURL, *publisherURL, log); err != nil {
		var field *relay.ConfigError
		if errors.As(err, &field) {
			fmt.Fprintln(os.Stderr, "configuration:", err)
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// run relays until ctx ends.
func run(ctx context.Context, storageURL, publisherURL string, log *slog.Logger) error {
	if storageURL == "" {
		return errors.New("no storage: set -storage or STORAGE_URL")
	}
	store, err := storage.Open(ctx, storageURL)
	if err != nil {
		return err
	}
	defer store.Close()
	pub, err := publisher.Open(ctx, publisherURL)
	if err != nil {
		return err
	}
	defer func() { _ = pub.Close(context.WithoutCancel(ctx)) }()

	cfg := relay.Config{
		RelayID:   "embedded-" + hostname(),
		LeaseMode: relay.LeaseStatus,
		Logger:    log,
	}
	engine, err := relay.New(cfg, store, pub)
	if err != nil {
		return err
	}
	// The reaper goes by the engine's rules: its lease timeout and attempt
	// limit (zero fields: the same defaults on both sides).
	rp, err := reaper.New(reaper.Config{
		LeaseTimeout: cfg.LeaseTimeout,
		MaxAttempts:  cfg.Retry.MaxAttempts,
		Interval:     10 * time.Second,
		Logger:       log,
	}, store)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rp.Run(ctx)
	}()
	engine.Run(ctx) // until ctx ends, then a clean shutdown
	wg.Wait()
	return nil
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "unknown"
	}
	return h
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
