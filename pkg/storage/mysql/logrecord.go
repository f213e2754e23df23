package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"

	"github.com/go-sql-driver/mysql"
	"github.com/google/uuid"

	"github.com/outbox-relay/relay/pkg/storage"
)

// The log reader's side of the store (storage.LogRecorder): settling events
// the relay read from the binlog (CAPTURE=binlog) rather than claimed. Each
// statement changes only rows still PENDING and fresh (available_at not
// after created_at), the rows no claim has touched
// (sql/record_delivered.sql). MySQL has no partitions, so the created_at
// values the log read (Outcome.CreatedAt) are not needed.

// Record records o on the log reader's rows, a statement per kind, one
// after another (byKind): delivered rows DELIVERED (record_delivered.sql),
// or deleted with o.Delete (record_deleted.sql); failed ones by the
// failure rule of Settle (record_failed.sql): attempts+1 and last_error,
// DEAD when the failure says so, else PENDING and due again after its
// delay; released ones handed to the claims (defer.sql): due again at
// once (available_at now, or just after a created_at ahead of the clock)
// and updated_at now, so that their place in the claims' index (state_at)
// lies ahead of where the claims have got to. None leaves a row fresh, so
// running the call again after an error changes nothing that landed.
func (s *Store) Record(ctx context.Context, o storage.Outcome) (storage.Settled, error) {
	return byKind("record", o, func() (int, error) {
		return s.record(ctx, s.queries[deliveredStatement(o, "record_delivered", "record_deleted")], o.Delivered, nil)
	}, func() (int, error) {
		query, lead, ids := s.withFailures("record_failed", o.Failed)
		return s.record(ctx, query, ids, lead)
	}, func() (int, error) {
		return s.record(ctx, s.queries["defer"], o.Released, nil)
	})
}

// record runs one of the log reader's statements: its leading arguments,
// then the ids ({{ids}}). It returns the rows changed.
func (s *Store) record(ctx context.Context, query string, ids []uuid.UUID, lead []any) (int, error) {
	q := expandList(query, "{{ids}}", len(ids))
	args := append(lead, idArgs(ids)...)
	var n int64
	err := withLockRetry(ctx, func() error {
		res, err := s.db.ExecContext(ctx, q, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	s.recycle(err)
	return int(n), err
}

// blockedKeysChunk bounds the keys of one BlockedKeys statement.
const blockedKeysChunk = 200

// BlockedKeys returns, for each of p.Keys that has one, the lowest seq of
// an event that blocks it: PENDING and due again (available_at after
// created_at), DELIVERING, fresh PENDING with seq up to p.Backfill, or,
// under p.OnDead block, DEAD. A few entries of key_order_seq_idx per key;
// keys compare bytewise (VARBINARY).
func (s *Store) BlockedKeys(ctx context.Context, p storage.BlockedKeysParams) (map[string]int64, error) {
	blocked := map[string]int64{}
	branch := s.queries["blocked_keys"]
	if p.OnDead == storage.DeadBlock {
		branch = strings.Replace(branch, "{{dead}}", s.queries["blocked_keys_dead"], 1)
	} else {
		branch = strings.Replace(branch, "{{dead}}", "", 1)
	}
	backfill := max(p.Backfill, 0)
	for start := 0; start < len(p.Keys); start += blockedKeysChunk {
		keys := p.Keys[start:min(start+blockedKeysChunk, len(p.Keys))]
		parts := make([]string, len(keys))
		args := make([]any, 0, 4*len(keys))
		for i, k := range keys {
			parts[i] = branch
			args = append(args, []byte(k), []byte(k), backfill)
			if p.OnDead == storage.DeadBlock {
				args = append(args, []byte(k))
			}
		}
		if err := s.blockedIn(ctx, strings.Join(parts, "\nUNION ALL\n"), args, blocked); err != nil {
			s.recycle(err)
			return nil, fmt.Errorf("find blocked keys: %w", err)
		}
	}
	return blocked, nil
}

// blockedIn runs one BlockedKeys statement and keeps each key's lowest seq
// in blocked.
func (s *Store) blockedIn(ctx context.Context, query string, args []any, blocked map[string]int64) error {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			key []byte
			seq int64
		)
		if err := rows.Scan(&key, &seq); err != nil {
			return err
		}
		if have, ok := blocked[string(key)]; !ok || seq < have {
			blocked[string(key)] = seq
		}
	}
	return rows.Err()
}

// Visible reports whether every transaction of ids is visible to new
// reads. On MySQL and MariaDB the log reader names a transaction by the
// decimal seq of one of its rows (capture.Txn.ID). The binlog is written
// before InnoDB commits, so a reader may get a transaction a moment before
// its rows can be settled; Visible reads those rows with a locking read
// (visible.sql) in a short READ COMMITTED transaction, which waits for the
// inserting transaction's implicit lock: when it returns, each has
// committed (or rolled back, and left no row). So it answers true, or
// false when the wait outlasts innodb_lock_wait_timeout; an id that is
// no seq is an error naming it.
func (s *Store) Visible(ctx context.Context, ids []string) (bool, error) {
	if len(ids) == 0 {
		return true, nil
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		seq, err := strconv.ParseInt(id, 10, 64)
		if err != nil || seq < 1 {
			return false, fmt.Errorf("wait for transactions to become visible: %q is no seq of table %s, which names a transaction of MySQL's log", id, s.table)
		}
		args[i] = seq
	}
	err := func() error {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		rows, err := tx.QueryContext(ctx, expandList(s.queries["visible"], "{{ids}}", len(ids)), args...)
		if err != nil {
			return err
		}
		for rows.Next() {
		}
		if err := rows.Close(); err != nil {
			return err
		}
		return rows.Err()
	}()
	switch {
	case err == nil:
		return true, nil
	case isLockWaitTimeout(err):
		return false, nil
	}
	s.recycle(err)
	return false, fmt.Errorf("wait for transactions to become visible: %w", err)
}

// FreshLeft reports whether a fresh PENDING row with seq up to upTo is
// left: the claims' backfill up to upTo is done when none is.
func (s *Store) FreshLeft(ctx context.Context, upTo int64) (bool, error) {
	var left bool
	if err := s.db.QueryRowContext(ctx, s.queries["fresh_left"], upTo).Scan(&left); err != nil {
		s.recycle(err)
		return false, fmt.Errorf("look for events left to backfill: %w", err)
	}
	return left, nil
}

// LastSeq is the table's AUTO_INCREMENT counter less one (0: none handed
// out): InnoDB takes every seq from that counter at the INSERT, before the
// writing transaction ends, so every seq handed out so far — of committed
// transactions and of ones still open — is at or below it. MAX(seq) would
// be below the seqs of a transaction that has written its binlog events
// but that InnoDB has not yet committed (the binlog is written first), so
// a log reader whose stream starts just after those events would leave
// them to no one. The counter is read through information_schema.TABLES
// (last_seq.sql), on MySQL 8 with its statistics cache turned off for the
// session (last_seq_fresh.sql); it may run ahead of the highest seq
// written (values reserved by a bulk insert, rolled back), which only
// widens the claims' backfill.
func (s *Store) LastSeq(ctx context.Context) (int64, error) {
	mariaDB, err := s.isMariaDB(ctx)
	if err != nil {
		return 0, fmt.Errorf("read the last seq: %w", err)
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return 0, fmt.Errorf("read the last seq: %w", err)
	}
	defer conn.Close()
	if !mariaDB {
		if _, err := conn.ExecContext(ctx, s.queries["last_seq_fresh"]); err != nil {
			s.recycle(err)
			return 0, fmt.Errorf("read the last seq: %w", err)
		}
	}
	var next sql.NullInt64
	if err := conn.QueryRowContext(ctx, s.queries["last_seq"], s.database, s.table.Name).Scan(&next); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return 0, s.tableMissing("")
		}
		s.recycle(err)
		return 0, fmt.Errorf("read the last seq: %w", err)
	}
	return max(next.Int64-1, 0), nil
}

// LockLog takes the table's log lock: the row of <table>_log_lock, FOR
// UPDATE (log_lock.sql), in a transaction left open on a connection of its
// own. It waits for the claims that hold the row shared
// (FreshEvents.WhenUnlocked), asking again after each lock-wait timeout
// until ctx ends. unlock rolls the transaction back and closes the
// connection; a connection that dies releases the lock with it.
func (s *Store) LockLog(ctx context.Context) (unlock func(), err error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("take the table's log lock: %w", err)
	}
	var tx *sql.Tx
	for {
		// Not ctx: database/sql rolls a transaction back when its
		// context ends, and the lock must outlive the stream's, until
		// its last batch is recorded (unlock). ctx still ends the wait.
		if tx, err = conn.BeginTx(context.WithoutCancel(ctx), nil); err != nil {
			break
		}
		var id int
		if err = tx.QueryRowContext(ctx, s.queries["log_lock"]).Scan(&id); err == nil {
			break
		}
		_ = tx.Rollback()
		if !isLockWaitTimeout(err) || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		if tx != nil {
			_ = tx.Rollback()
		}
		_ = conn.Close()
		if errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("take the table's log lock: %s has no row; run `relay-cli migrate`", s.table.LogLock())
		}
		s.recycle(err)
		return nil, fmt.Errorf("take the table's log lock (%s; run `relay-cli migrate` if it is missing): %w", s.table.LogLock(), err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			_ = tx.Rollback()
			_ = conn.Close()
		})
	}, nil
}

// freshTo is the highest seq of a fresh row a claim running in q may take
// (math.MaxInt64: every one). With FreshEvents.WhenUnlocked it first
// tries the log lock's row shared (fresh_lock.sql): q must be the claim's
// transaction, which then holds the row until it ends.
func (s *Store) freshTo(ctx context.Context, q querier, f storage.FreshEvents) (int64, error) {
	upTo := f.UpTo()
	if !f.ToLog || !f.WhenUnlocked {
		return upTo, nil
	}
	mariaDB, err := s.isMariaDB(ctx)
	if err != nil {
		return 0, err
	}
	name := "fresh_lock_mysql"
	if mariaDB {
		name = "fresh_lock"
	}
	var id int
	switch err := q.QueryRowContext(ctx, s.queries[name]).Scan(&id); {
	case err == nil:
		return math.MaxInt64, nil
	case errors.Is(err, sql.ErrNoRows):
		return upTo, nil
	default:
		return 0, fmt.Errorf("try the table's log lock: %w", err)
	}
}

// isMariaDB reports whether the server is MariaDB rather than MySQL, asked
// once (server_flavour.sql).
func (s *Store) isMariaDB(ctx context.Context) (bool, error) {
	switch s.flavour.Load() {
	case flavourMariaDB:
		return true, nil
	case flavourMySQL:
		return false, nil
	}
	var version string
	if err := s.db.QueryRowContext(ctx, s.queries["server_flavour"]).Scan(&version); err != nil {
		s.recycle(err)
		return false, fmt.Errorf("read the server's version: %w", err)
	}
	if strings.Contains(strings.ToLower(version), "mariadb") {
		s.flavour.Store(flavourMariaDB)
		return true, nil
	}
	s.flavour.Store(flavourMySQL)
	return false, nil
}

// Server flavours (Store.flavour); 0 is not asked yet.
const (
	flavourMySQL   = 1
	flavourMariaDB = 2
)

// isLockWaitTimeout reports whether err is InnoDB's lock-wait timeout.
func isLockWaitTimeout(err error) bool {
	var myErr *mysql.MySQLError
	return errors.As(err, &myErr) && myErr.Number == errLockWaitTimeout
}
