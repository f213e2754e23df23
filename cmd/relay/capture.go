package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"

	gosql "github.com/go-sql-driver/mysql"

	"github.com/outbox-relay/relay/internal/telemetry"
	"github.com/outbox-relay/relay/pkg/capture"
	"github.com/outbox-relay/relay/pkg/capture/binlog"
	"github.com/outbox-relay/relay/pkg/capture/pgwal"
	"github.com/outbox-relay/relay/pkg/storage"
	schema "github.com/outbox-relay/relay/schema/postgres"
)

// walStore is what CAPTURE=wal needs of the storage: a recorder of what
// the log delivered, and the connection and table pgwal reads the log of.
type walStore interface {
	storage.LogRecorder
	// ConnString is the storage URL as the database client takes it.
	ConnString() string
	Table() string
	// SQL is the store's pool, which reads the slot's status.
	SQL() (*sql.DB, string)
}

// walCapture is what CAPTURE=wal or CAPTURE=binlog reads the log from and
// records through.
type walCapture struct {
	source   capture.Source
	recorder storage.LogRecorder
	// retained reads the WAL the slot keeps, for the retained_bytes gauge.
	retained telemetry.SlotReader
	// position is what keeps the reader's place, as log lines name it.
	position string
}

// openWAL sets up CAPTURE=wal: the publication when STORAGE_AUTO_MIGRATE
// asks for it, and a check that the database and role can stream (exit 2
// with the fix when not).
func openWAL(ctx context.Context, cfg config, store storage.Storage, log *slog.Logger) (walCapture, error) {
	ws, ok := store.(walStore)
	if !ok {
		return walCapture{}, usageError{errors.New("CAPTURE=wal: this storage has no write-ahead log to read; use CAPTURE=poll")}
	}
	table, err := schema.ParseTable(ws.Table())
	if err != nil {
		return walCapture{}, err
	}
	// The reader streams over WAL_STORAGE_URL when set; the publication
	// and the slot's status go over the storage's own connection, the
	// table owner's.
	read := cfg.walConfig(log)
	read.Schema, read.Table = table.Schema, table.Name
	own := read
	own.ConnString = ws.ConnString()
	if read.ConnString == "" {
		read.ConnString = own.ConnString
	}
	src := pgwal.Source{Config: read}
	slot, publication := read.SlotName(), read.PublicationName()
	if cfg.AutoMigrate {
		// The server first: nothing is created in a database that cannot
		// serve the reader.
		if err := pgwal.CheckServer(ctx, read); err != nil {
			return walCapture{}, walSetupError(err)
		}
		if err := pgwal.CreatePublication(ctx, own); err != nil {
			return walCapture{}, err
		}
		log.Info("publication ready", "publication", publication)
	}
	if err := pgwal.Check(ctx, read); err != nil {
		return walCapture{}, walSetupError(err)
	}
	log.Info("reading new events from the write-ahead log", "slot", slot, "publication", publication)
	return walCapture{
		source:   src,
		recorder: ws,
		retained: func(ctx context.Context) (int64, bool, error) {
			db, _ := ws.SQL()
			st, err := pgwal.ReadSlot(ctx, db, slot)
			return st.RetainedBytes, st.Exists, err
		},
	}, nil
}

// walSetupError makes a setting an operator must change a usage error
// (exit 2).
func walSetupError(err error) error { return setupUsageError("CAPTURE=wal", err) }

// binlogStore is what CAPTURE=binlog needs of the storage: a recorder of
// what the log delivered, and the connection and table to read the log
// of (pkg/storage/mysql).
type binlogStore interface {
	storage.LogRecorder
	ConnConfig() *gosql.Config
	Database() string
	TableName() string
}

// openBinlog sets up CAPTURE=binlog: a check that the server keeps the
// log the reader needs (exit 2 with the fix when not) and, with
// STORAGE_AUTO_MIGRATE, the table where the reader keeps its position.
func openBinlog(ctx context.Context, cfg config, store storage.Storage, log *slog.Logger) (walCapture, error) {
	bs, ok := store.(binlogStore)
	if !ok {
		return walCapture{}, usageError{errors.New("CAPTURE=binlog: this storage has no binary log to read; use CAPTURE=poll")}
	}
	read := binlog.Config{Conn: bs.ConnConfig(), Database: bs.Database(), Table: bs.TableName(),
		ServerID: cfg.BinlogServerID, RelayID: cfg.RelayID, Logger: log}
	if err := binlog.CheckServer(ctx, read); err != nil {
		return walCapture{}, setupUsageError("CAPTURE=binlog", err)
	}
	if cfg.AutoMigrate {
		if err := binlog.CreatePositionTable(ctx, read); err != nil {
			return walCapture{}, setupUsageError("CAPTURE=binlog", err)
		}
	}
	serverID := read.ServerID
	if serverID == 0 {
		serverID = binlog.ServerIDFor(cfg.RelayID)
	}
	log.Info("reading new events from the binary log", "server_id", serverID, "position_table", binlog.PositionTable)
	return walCapture{
		source:   binlog.Source{Config: read},
		recorder: bs,
		position: "binlog position",
		retained: func(context.Context) (int64, bool, error) { return 0, false, nil },
	}, nil
}

// setupUsageError makes a setting an operator must change a usage error
// (exit 2), named after the capture.
func setupUsageError(what string, err error) error {
	var setup *capture.SetupError
	if errors.As(err, &setup) {
		return usageError{fmt.Errorf("%s: %w", what, err)}
	}
	return err
}
