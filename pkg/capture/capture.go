// Package capture is the boundary between the relay and the logs it can
// read events from instead of claiming rows: a Source opens a
// Stream of committed transactions, in commit order, and is told when each
// is acknowledged (Txn.Ack: its events are settled, the relay's word for
// their outcome being recorded), so that it tells the database to discard
// only what can never be needed again. pkg/capture/pgwal reads PostgreSQL's
// write-ahead log (CAPTURE=wal), pkg/capture/binlog MySQL's and MariaDB's
// binary log (CAPTURE=binlog).
package capture

import (
	"context"
	"errors"

	"github.com/outbox-relay/relay/pkg/outbox"
)

// Source opens streams from one database's log.
type Source interface {
	// Open starts a stream where the last acknowledged one ended. Errors:
	// ErrBusy while another reader holds the log, ErrLost when the log
	// lost what it had kept (the events are still in the table), a
	// *SetupError for a setting an operator must change, or a connection
	// error (try again).
	Open(ctx context.Context) (Stream, Start, error)
	// Reset discards a lost log position so that the next Open starts a
	// new one from now. The caller says so loudly and delivers what was
	// written meanwhile from the table.
	Reset(ctx context.Context) error
}

// Start says how a stream began.
type Start struct {
	// Created is true when the log position is new: events written
	// before it are not in the stream, only in the table.
	Created bool
	// Position describes where the stream starts, for the log.
	Position string
	// Server identifies the database server and its history (PostgreSQL:
	// system id and timeline). A different one between two streams means
	// a failover or a restore: the log position there is new.
	Server string
}

// Stream is one open stream of committed transactions.
type Stream interface {
	// Txns delivers the transactions with events, in commit order; it is
	// closed when the stream ends, and Err then says why.
	Txns() <-chan Txn
	Err() error
	// Close ends the stream, confirming to the database what was acknowledged.
	Close(ctx context.Context) error
}

// Txn is one committed transaction's events, in the order they were
// written. Seqs holds each event's insertion sequence (0: none).
type Txn struct {
	Events []outbox.Event
	Seqs   []int64
	// ID names the transaction as the database's log does, in the form
	// the database's storage.LogRecorder.Visible takes (PostgreSQL: its
	// xid, in decimal). A log may send a transaction as soon as its commit
	// is in the log, a moment before other sessions see its rows (longer
	// under synchronous replication): settling waits for it by this id.
	ID string
	// Ack acknowledges the transaction: every event of it is durably
	// settled (delivered, handed to the retry path, or DEAD), and the log
	// need not send it again. Safe from any goroutine; call it once.
	Ack func()
}

// Errors of Source.Open.
var (
	ErrBusy = errors.New("another relay is reading the log")
	ErrLost = errors.New("the log position was lost")
)

// SetupError is a database or role that cannot serve the log as
// configured: an operator must change something. Fix says what.
type SetupError struct {
	Problem string
	Fix     string
}

func (e *SetupError) Error() string { return e.Problem + "; " + e.Fix }
