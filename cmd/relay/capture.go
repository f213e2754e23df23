package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/outbox-relay/relay/internal/telemetry"
	"github.com/outbox-relay/relay/pkg/capture"
	"github.com/outbox-relay/relay/pkg/capture/pgwal"
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

// walCapture is what CAPTURE=wal reads the log from and records through.
type walCapture struct {
	source   pgwal.Source
	recorder storage.LogRecorder
	// retained reads the WAL the slot keeps, for the retained_bytes gauge.
	retained telemetry.SlotReader
}

// openWAL sets up CAPTURE=wal: the publication when STORAGE_AUTO_MIGRATE
// asks for it, and a check that the database and role can stream (exit 2
// with the fix when not).
func openWAL(ctx context.Context, cfg config, store storage.Storage, log *slog.Logger) (walCapture, error) {
	ws, ok := store.(walStore)
	if !ok {
		return walCapture{}, usageError{errors.New("CAPTURE=wal: this storage has no write-ahead log to read; use CAPTURE=poll")}
	}
	slot, publication := cfg.walNames(ws.TableName())
	wcfg := cfg.walConfig(log)
	wcfg.Slot, wcfg.Publication = slot, publication
	src := ws.WALSource(wcfg)
	if cfg.AutoMigrate {
		// The server first: nothing is created in a database that cannot
		// serve the reader.
		if err := pgwal.CheckServer(ctx, src.Config); err != nil {
			return walCapture{}, walSetupError(err)
		}
		if err := ws.CreatePublication(ctx, publication); err != nil {
			return walCapture{}, err
		}
		log.Info("publication ready", "publication", publication)
	}
	if err := pgwal.Check(ctx, src.Config); err != nil {
		return walCapture{}, walSetupError(err)
	}
	log.Info("reading new events from the write-ahead log", "slot", slot, "publication", publication)
	return walCapture{
		source:   src,
		recorder: ws,
		retained: func(ctx context.Context) (int64, bool, error) {
			st, err := ws.SlotStatus(ctx, slot)
			return st.RetainedBytes, st.Exists, err
		},
	}, nil
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
