package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/outbox-relay/relay/internal/telemetry"
	"github.com/outbox-relay/relay/pkg/capture"
	"github.com/outbox-relay/relay/pkg/capture/pgwal"
	"github.com/outbox-relay/relay/pkg/relay"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/postgres"
	schema "github.com/outbox-relay/relay/schema/postgres"
)

// walStore is what CAPTURE=wal needs of the storage: PostgreSQL's.
type walStore interface {
	storage.LogRecorder
	WALSource(cfg pgwal.Config) pgwal.Source
	CreatePublication(ctx context.Context, name string) error
	SlotStatus(ctx context.Context, name string) (postgres.SlotStatus, error)
	TableName() schema.Table
}

// walNames are the slot and publication CAPTURE=wal uses for table.
func (c config) walNames(table schema.Table) (slot, publication string) {
	slot, publication = c.WALSlotName, c.WALPublicationName
	if slot == "" {
		slot = postgres.SlotDefault(table)
	}
	if publication == "" {
		publication = postgres.PublicationDefault(table)
	}
	return slot, publication
}

// newCapture sets up CAPTURE=wal: the publication when STORAGE_AUTO_MIGRATE
// asks for it, a check that the database and role can stream (exit 2 with
// the fix when not), and the Capture beside engine.
func newCapture(ctx context.Context, cfg config, store storage.Storage, engine *relay.Engine, tel *telemetry.Telemetry, log *slog.Logger) (*relay.Capture, error) {
	ws, ok := store.(walStore)
	if !ok {
		return nil, usageError{errors.New("CAPTURE=wal: this storage has no write-ahead log to read; use CAPTURE=poll")}
	}
	slot, publication := cfg.walNames(ws.TableName())
	wcfg := cfg.walConfig(log)
	wcfg.Slot, wcfg.Publication = slot, publication
	src := ws.WALSource(wcfg)
	if cfg.AutoMigrate {
		// The server first: nothing is created in a database that cannot
		// serve the reader.
		if err := pgwal.CheckServer(ctx, src.Config); err != nil {
			return nil, walSetupError(err)
		}
		if err := ws.CreatePublication(ctx, publication); err != nil {
			return nil, err
		}
		log.Info("publication ready", "publication", publication)
	}
	if err := pgwal.Check(ctx, src.Config); err != nil {
		return nil, walSetupError(err)
	}
	obs, err := tel.CaptureObserver(func(ctx context.Context) (int64, bool, error) {
		st, err := ws.SlotStatus(ctx, slot)
		return st.RetainedBytes, st.Exists, err
	}, log)
	if err != nil {
		return nil, err
	}
	log.Info("reading new events from the write-ahead log", "slot", slot, "publication", publication)
	return relay.NewCapture(engine, src, ws, relay.CaptureConfig{Observer: obs})
}

// walSetupError makes a setting an operator must change a usage error
// (exit 2).
func walSetupError(err error) error {
	var setup *capture.SetupError
	if errors.As(err, &setup) {
		return usageError{fmt.Errorf("CAPTURE=wal: %w", err)}
	}
	return err
}
