package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/relay/pkg/storage"
)

// Held claims (storage.HeldQueue, LEASE_MODE=lock): the claim's transaction
// stays open on a connection of its own while its batch is at the broker,
// and the outcome is recorded and committed in it. The rows never become
// DELIVERING: a delivered event costs one row version and its index entries
// instead of two, and the settle needs no lease guard, since no other
// statement can change a row this transaction has locked.

var _ storage.HeldQueue = (*Store)(nil)

// ClaimHeld claims as Claim does, leaving the rows PENDING under the row
// locks of the returned transaction.
func (s *Store) ClaimHeld(ctx context.Context, p storage.ClaimParams, idle time.Duration) (storage.HeldBatch, error) {
	if p.Ordering == storage.OrderingPartition || p.Fresh.ToLog {
		return storage.HeldBatch{}, errors.New("claim batch: a held claim is unordered and polls every event")
	}
	if idle < time.Millisecond {
		return storage.HeldBatch{}, fmt.Errorf("claim batch: a held claim's idle time must be at least 1ms, not %v", idle)
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return storage.HeldBatch{}, fmt.Errorf("claim batch: %w", err)
	}
	tx := &heldTx{s: s, conn: conn, unhold: func(bool) {}}
	b, addrs, unhold, err := s.claim(ctx, conn, p, idle)
	if unhold != nil {
		tx.unhold = unhold
	}
	if err != nil || len(b.Events) == 0 {
		tx.Abort()
		return storage.HeldBatch{}, err
	}
	tx.lease = b.Lease
	tx.rows = make(map[uuid.UUID]rowAddress, len(addrs))
	for i, a := range addrs {
		tx.rows[b.Events[i].ID] = a
	}
	return storage.HeldBatch{Batch: b, Tx: tx}, nil
}

// SettleHeld records a held batch's outcome on its rows still PENDING, in a
// transaction of its own (one pipeline).
func (s *Store) SettleHeld(ctx context.Context, lease storage.Lease, o storage.Outcome) (storage.Settled, error) {
	b := &settleBatch{}
	s.queueHeld(b, lease, o, nil)
	return s.sendSettle(ctx, "record held batch", b)
}

// queueHeld queues the statements that record o on the rows of lease.
// With rows (where each row lies, in the claim's transaction) the
// statements find them there; without, by id.
func (s *Store) queueHeld(b *settleBatch, lease storage.Lease, o storage.Outcome, rows map[uuid.UUID]rowAddress) {
	// queue queues name for ids: by address, once for each table (the
	// partition, on a partitioned table) holding some of them, since an
	// address names a row only within its table; or by id.
	queue := func(kind *int, name string, ids []uuid.UUID) {
		if rows == nil {
			b.queue(kind, s.queries[name+"_by_id"], []pgtype.TID(nil), uuidArray(ids))
			return
		}
		for table, tids := range addressesByTable(rows, ids) {
			b.queue(kind, s.queries[name], tids, table, createdFrom(lease), createdTo(lease))
		}
	}
	if len(o.Delivered) > 0 {
		name := "held_delivered"
		if o.Delete {
			name = "held_deleted"
		}
		queue(&b.settled.Delivered, name, o.Delivered)
	}
	if len(o.Failed) > 0 {
		// Failures are few, and each carries its own values: they are
		// joined to their rows, each address checked against its id.
		ids, msgs, dead, delays := failureArrays(o.Failed)
		if rows == nil {
			b.queue(&b.settled.Failed, s.queries["held_failed_by_id"], []pgtype.TID(nil), ids, msgs, dead, delays)
		} else {
			tids := make([]pgtype.TID, len(o.Failed))
			for i, f := range o.Failed {
				tids[i] = rows[f.ID].tid
			}
			b.queue(&b.settled.Failed, s.queries["held_failed"], tids, ids, msgs, dead, delays, createdFrom(lease), createdTo(lease))
		}
	}
	if len(o.Released) > 0 {
		queue(&b.settled.Released, "held_released", o.Released)
	}
}

// rowAddress is where a held claim found a row: its table (tableoid: the
// partition, on a partitioned table) and its place in that table (ctid).
// While the claim's transaction holds the row's lock, no statement can
// move the row, and so no other row can take its place.
type rowAddress struct {
	table uint32
	tid   pgtype.TID
}

// addressesByTable returns the addresses of ids among rows, by table. A
// plain table is one table; a partitioned one spreads a batch over as many
// partitions as its created_at range crosses, usually one.
func addressesByTable(rows map[uuid.UUID]rowAddress, ids []uuid.UUID) map[uint32][]pgtype.TID {
	by := make(map[uint32][]pgtype.TID, 1)
	for _, id := range ids {
		a, ok := rows[id]
		if !ok {
			continue // not one of the batch's rows: nothing to find
		}
		by[a.table] = append(by[a.table], a.tid)
	}
	return by
}

// heldTx is a held claim's open transaction on its own connection.
type heldTx struct {
	s     *Store
	conn  *pgxpool.Conn // nil once the transaction has ended
	lease storage.Lease
	// rows are where the claim found each of its rows.
	rows map[uuid.UUID]rowAddress
	// unhold tells the claim frontier that the transaction has ended,
	// and whether without a commit.
	unhold func(abandoned bool)
}

// Lease moves the rows to DELIVERING under a lease of relayID and commits,
// in one round trip.
func (t *heldTx) Lease(ctx context.Context, relayID string) (storage.Lease, error) {
	ids := make([]uuid.UUID, 0, len(t.rows))
	addrs := make([]pgtype.TID, 0, len(t.rows))
	for id, a := range t.rows {
		ids = append(ids, id)
		addrs = append(addrs, a.tid)
	}
	lease := storage.Lease{RelayID: relayID, CreatedFrom: t.lease.CreatedFrom, CreatedTo: t.lease.CreatedTo}
	b := &pgx.Batch{}
	b.Queue(t.s.queries["held_lease"], relayID, addrs, uuidArray(ids), createdFrom(t.lease), createdTo(t.lease))
	err := t.commit(ctx, b, func(results pgx.BatchResults) error {
		rows, err := results.Query()
		if err != nil {
			return err
		}
		leased := 0
		for rows.Next() {
			if err := rows.Scan(&lease.LockedAt); err != nil {
				rows.Close()
				return err
			}
			leased++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if leased != len(ids) {
			// The rows are locked, so this cannot happen; a batch only
			// partly leased would be worse than none.
			return fmt.Errorf("leased %d of the %d rows held", leased, len(ids))
		}
		return nil
	})
	if err != nil {
		return storage.Lease{}, fmt.Errorf("lease held batch: %w", err)
	}
	return lease, nil
}

// Settle records o and commits, in one round trip.
func (t *heldTx) Settle(ctx context.Context, o storage.Outcome) error {
	b := &settleBatch{}
	t.s.queueHeld(b, t.lease, o, t.rows)
	if err := t.commit(ctx, &b.Batch, b.read); err != nil {
		return fmt.Errorf("settle held batch: %w", err)
	}
	return nil
}

// commit runs b's statements in the transaction, after held_plan.sql, and
// commits, in one round trip; read takes b's results. Either way the
// transaction has ended when it returns: committed, or rolled back on an
// error.
func (t *heldTx) commit(ctx context.Context, b *pgx.Batch, read func(pgx.BatchResults) error) error {
	if t.conn == nil {
		return errors.New("its transaction has ended")
	}
	pipeline := &pgx.Batch{}
	pipeline.Queue(t.s.queries["held_plan"])
	pipeline.QueuedQueries = append(pipeline.QueuedQueries, b.QueuedQueries...)
	pipeline.Queue("COMMIT")
	err := func() error {
		results := t.conn.SendBatch(ctx, pipeline)
		defer func() { _ = results.Close() }()
		if _, err := results.Exec(); err != nil {
			return err
		}
		if err := read(results); err != nil {
			return err
		}
		tag, err := results.Exec()
		if err != nil {
			return err
		}
		if tag.String() != "COMMIT" {
			// COMMIT of a transaction that had already failed.
			return errors.New("the transaction was rolled back")
		}
		return results.Close()
	}()
	if err != nil {
		t.s.recycle(err)
		t.Abort()
		return err
	}
	t.conn.Release()
	t.conn = nil
	t.unhold(false)
	return nil
}

// abortTimeout bounds the rollback of a held claim's transaction; a
// connection that does not answer in time is closed, which ends it too.
const abortTimeout = 2 * time.Second

// Abort rolls the transaction back, or closes its connection when that
// fails.
func (t *heldTx) Abort() {
	if t.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), abortTimeout)
	defer cancel()
	if _, err := t.conn.Exec(ctx, "ROLLBACK"); err != nil {
		// Released in a transaction (or busy), the pool closes it.
		_ = t.conn.Conn().Close(ctx)
	}
	t.conn.Release()
	t.conn = nil
	t.unhold(true)
}

// heldLimit is how many rows a relay's held claims lock (LEASE_MODE=lock).
// A held claim locks its rows before it knows their sizes, and those past
// its byte limit it locks in vain: a row lock each (a WAL record), while
// the relay's claims step over them until it ends (cut). With payloads large
// enough that a few fill MAX_BATCH_BYTES, locking BATCH_SIZE rows a claim
// would lock dozens in vain per event it takes. Once a claim is cut, the
// next lock twice what fit: the batches still fill their byte limit, and
// the rows locked in vain stay about as many as those taken. The cap
// doubles again with every batch that fills its count without a cut.
type heldLimit struct {
	cap int // 0: none
}

// rows is the next held claim's row limit, at most limit (BATCH_SIZE).
func (h *heldLimit) rows(limit int) int {
	if h.cap > 0 && h.cap < limit {
		return h.cap
	}
	return limit
}

// claimed records a held claim that could lock limit rows, took taken and
// locked cut more past its byte limit.
func (h *heldLimit) claimed(limit, taken, cut int) {
	switch {
	case cut > 0:
		h.cap = max(1, 2*taken)
	case taken >= limit && h.cap > 0:
		h.cap = 2 * limit
	}
}
