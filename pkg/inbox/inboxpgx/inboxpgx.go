// Package inboxpgx applies events once through the inbox with pgx/v5 on
// PostgreSQL: the same rules as inbox.Process, with a pgx.Tx for the
// effect.
//
//	applied, err := inboxpgx.Process(ctx, nil, pool, "billing", id, func(tx pgx.Tx) error {
//		_, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance + $1 WHERE id = $2", amount, account)
//		return err
//	})
//
// It is a package of its own so that consumers on database/sql (MySQL ones
// especially) do not link pgx. The table's upkeep (CreateTable, Prune)
// stays on database/sql: stdlib.OpenDBFromPool(pool) gives a pool's
// connections a *sql.DB face for it.
package inboxpgx

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/relay/pkg/inbox"
)

// Beginner starts a transaction: *pgxpool.Pool and *pgx.Conn, or a pgx.Tx,
// in which Begin starts a savepoint — so Process joins a transaction of
// the caller's and, on the handler's error, rolls back only what it did.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Process runs fn, the event's effect, in a transaction (or savepoint) of
// db that also records eventID for consumer in box's table, and commits
// both together. A nil box is inbox.Default(), the table "inbox". The
// results are inbox.Process's: (true, nil) applied, (false, nil) a
// duplicate — ack both — and an error when nothing was committed, fn's
// own error unchanged.
func Process(ctx context.Context, box *inbox.Inbox, db Beginner, consumer, eventID string, fn func(tx pgx.Tx) error) (applied bool, err error) {
	if box == nil {
		box = inbox.Default()
	}
	if box.Dialect() != inbox.Postgres {
		return false, errors.New("inboxpgx: the inbox must use the Postgres dialect")
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("inbox: begin transaction for event %s: %w", eventID, err)
	}
	defer func() {
		if !applied {
			_ = tx.Rollback(ctx)
		}
	}()
	fresh, err := box.Record(ctx, Tx(tx), consumer, eventID)
	if err != nil || !fresh {
		return false, err
	}
	if err := fn(tx); err != nil {
		return false, err
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("inbox: commit event %s for consumer %q: %w", eventID, consumer, err)
	}
	return true, nil
}

// Record inserts (consumer, eventID) into box's table within tx and
// reports whether the event is new to the consumer; see inbox.Record. A
// nil box is inbox.Default().
func Record(ctx context.Context, box *inbox.Inbox, tx pgx.Tx, consumer, eventID string) (fresh bool, err error) {
	if box == nil {
		box = inbox.Default()
	}
	return box.Record(ctx, Tx(tx), consumer, eventID)
}

// Tx adapts a pgx transaction to inbox.Execer.
func Tx(tx pgx.Tx) inbox.Execer { return execer{tx} }

type execer struct{ tx pgx.Tx }

func (e execer) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	tag, err := e.tx.Exec(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return rowsAffected(tag.RowsAffected()), nil
}

type rowsAffected int64

func (r rowsAffected) LastInsertId() (int64, error) { return 0, errors.New("inboxpgx: no insert ids") }
func (r rowsAffected) RowsAffected() (int64, error) { return int64(r), nil }
