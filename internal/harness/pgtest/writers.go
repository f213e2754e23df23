package pgtest

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Writer is how a randomized test's producer transaction treats its rows'
// writer besides inserting them: the ways a row reaches the table with a
// writer id that is not its transaction's, or without a notification.
type Writer string

// The writers.
const (
	// WriterPlain inserts, and commits or rolls back.
	WriterPlain Writer = ""
	// WriterUpdate also sets writer_xid, after the inserts, to a value
	// of no transaction of this cluster's (Foreign).
	WriterUpdate Writer = "update"
	// WriterReplica inserts as a logical replica's apply worker does:
	// session_replication_role = replica, which leaves only the ALWAYS
	// triggers on, and writer_xid from the publisher (Foreign).
	WriterReplica Writer = "replica"
	// WriterPrepared commits in two phases, which sends no notification
	// (outbox.notify = off; docs/operations.md, two-phase producers).
	WriterPrepared Writer = "prepared"
)

// Writers are the writers to draw from: the plain one twice as often as
// the three others together.
var Writers = []Writer{WriterPlain, WriterPlain, WriterPlain, WriterPlain, WriterPlain, WriterPlain,
	WriterUpdate, WriterReplica, WriterPrepared}

// Foreign are writer ids of another cluster's: far behind, far ahead (2^62
// and 2^40).
var Foreign = []string{"'0'", "'5'", "'4611686018427387904'", "'1099511627776'"}

// Begin sets what w needs of tx before its inserts.
func (w Writer) Begin(ctx context.Context, tx pgx.Tx) error {
	var set string
	switch w {
	case WriterReplica:
		set = "SET LOCAL session_replication_role = replica"
	case WriterPrepared:
		set = "SET LOCAL outbox.notify = off"
	default:
		return nil
	}
	_, err := tx.Exec(ctx, set)
	return err
}

// Rewrite sets the writer of the rows ids of table to foreign, for
// WriterUpdate, after the inserts.
func (w Writer) Rewrite(ctx context.Context, tx pgx.Tx, table string, ids []uuid.UUID, foreign string) error {
	if w != WriterUpdate {
		return nil
	}
	_, err := tx.Exec(ctx, "UPDATE "+table+" SET writer_xid = "+foreign+" WHERE event_id = ANY($1)", ids)
	return err
}

// End commits tx, or rolls it back, after hold. A prepared one is
// prepared first (gid names it) and leaves conn's session: it stays
// running for the hold and ends by its id.
func (w Writer) End(ctx context.Context, conn *pgxpool.Conn, tx pgx.Tx, gid string, hold time.Duration, rollBack bool) error {
	if w == WriterPrepared {
		if _, err := tx.Exec(ctx, "PREPARE TRANSACTION '"+gid+"'"); err != nil {
			return err
		}
		time.Sleep(hold)
		end := "COMMIT PREPARED '" + gid + "'"
		if rollBack {
			end = "ROLLBACK PREPARED '" + gid + "'"
		}
		_, err := conn.Exec(ctx, end)
		return err
	}
	time.Sleep(hold)
	if rollBack {
		return tx.Rollback(ctx)
	}
	return tx.Commit(ctx)
}

// DueTimes reads the available_at of the rows ids of table, as tx sees
// them.
func DueTimes(ctx context.Context, tx pgx.Tx, table string, ids []uuid.UUID) (map[uuid.UUID]time.Time, error) {
	rows, err := tx.Query(ctx, "SELECT event_id, available_at FROM "+table+" WHERE event_id = ANY($1)", ids)
	if err != nil {
		return nil, err
	}
	due := map[uuid.UUID]time.Time{}
	for rows.Next() {
		var id uuid.UUID
		var at time.Time
		if err := rows.Scan(&id, &at); err != nil {
			return nil, err
		}
		due[id] = at
	}
	return due, rows.Err()
}
