package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/outbox-relay/relay/internal/bytesize"
	"github.com/outbox-relay/relay/pkg/capture/binlog"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/mysql"
)

// binlogJSON is the CAPTURE=binlog reader's position in stats --json, as
// wal_slot is the CAPTURE=wal slot: where the position is saved, where
// the server's log ends, and how far behind that is.
type binlogJSON struct {
	// PositionTable is where the position is kept, Lock the named lock
	// the reader holds; Active is true while a relay streams (holds it).
	PositionTable string `json:"position_table"`
	Lock          string `json:"lock"`
	Active        bool   `json:"active"`
	// Saved is the saved position, Server the server it is of.
	Saved   binlogPosJSON `json:"saved"`
	Server  string        `json:"server"`
	SavedAt time.Time     `json:"saved_at"`
	// ServerPosition is the end of the server's log now; null, with
	// ServerPositionError, when it could not be read.
	ServerPosition      *binlogPosJSON `json:"server_position"`
	ServerPositionError string         `json:"server_position_error,omitempty"`
	// BehindBytes is the log between the saved position and the server's
	// in the same file (0 in another); BehindFiles how many files the
	// saved position is behind (-1: the names do not tell).
	BehindBytes int64 `json:"behind_bytes"`
	BehindFiles int   `json:"behind_files"`
	// LagSeconds is how long ago the position was saved, by the server's
	// clock.
	LagSeconds float64 `json:"lag_seconds"`
}

// binlogPosJSON is a place in the binary log.
type binlogPosJSON struct {
	GTID string `json:"gtid"`
	File string `json:"file"`
	Pos  uint32 `json:"pos"`
}

func (p binlogPosJSON) String() string {
	return binlog.Position{GTID: p.GTID, File: p.File, Pos: p.Pos}.String()
}

// binlogPosition reads the CAPTURE=binlog position of a MySQL/MariaDB
// table; nil when none is saved (a polled table, or PostgreSQL).
func binlogPosition(ctx context.Context, store storage.Storage) (*binlogJSON, error) {
	my, ok := store.(*mysql.Store)
	if !ok {
		return nil, nil
	}
	st, err := binlog.ReadStatus(ctx, my.DB(), my.Database(), my.TableName())
	if !st.Saved {
		return nil, err
	}
	j := &binlogJSON{PositionTable: binlog.PositionTable, Lock: st.Lock, Active: st.Streaming,
		Saved:  binlogPosJSON{st.Position.GTID, st.Position.File, st.Position.Pos},
		Server: st.Server, SavedAt: st.SavedAt, LagSeconds: st.Age.Seconds()}
	if err != nil {
		j.ServerPositionError = err.Error()
		return j, nil
	}
	j.ServerPosition = &binlogPosJSON{st.Current.GTID, st.Current.File, st.Current.Pos}
	j.BehindBytes, j.BehindFiles = st.BehindBytes, st.BehindFiles
	return j, nil
}

// behind says how far the saved position is behind the server's, in words.
func (b *binlogJSON) behind() string {
	switch {
	case b.ServerPosition == nil:
		return "unknown"
	case b.BehindFiles < 0:
		return "in another file"
	case b.BehindFiles == 1:
		return "1 file behind"
	case b.BehindFiles > 1:
		return fmt.Sprintf("%d files behind", b.BehindFiles)
	}
	return bytesize.Format(b.BehindBytes) + " behind"
}

// streams says whether a relay reads the log now, in words.
func (b *binlogJSON) streams() string {
	if b.Active {
		return "a relay streams (holds lock " + b.Lock + ")"
	}
	return "no relay streams (nobody holds lock " + b.Lock + ")"
}

// writeBinlogText is the position in stats' text form.
func writeBinlogText(out io.Writer, b *binlogJSON) error {
	lag := time.Duration(b.LagSeconds * float64(time.Second))
	server := "unreadable: " + b.ServerPositionError
	if b.ServerPosition != nil {
		server = b.ServerPosition.String()
	}
	_, err := fmt.Fprintf(out, "\nbinlog position (CAPTURE=binlog, in %s): %s\nsaved %s at %s, %s ago (lag)\nserver at %s: %s\n",
		b.PositionTable, b.streams(), b.Saved, b.SavedAt.UTC().Format(time.RFC3339), formatAge(lag), server, b.behind())
	return err
}
