package relay_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	gosql "github.com/go-sql-driver/mysql"
	"github.com/google/uuid"

	"github.com/outbox-relay/relay/pkg/capture/binlog"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/relay"
)

// TestBinlogClaimsUnderRandomInterleavings checks CAPTURE=binlog's promise
// (docs/architecture.md, "Capture from the binary log") on a quiet private
// MariaDB with its log on, sweeps off. Producers write transactions of one
// row to a few hundred, one row at a time, as one multi-row INSERT or as
// an INSERT … SELECT (InnoDB's bulk insert, which holds the table's
// AUTO-INC lock to its end), held open up to 10 s, waiting between their
// INSERTs on row locks the other producers hold, some rolled back, some
// scheduled. Relays, one or two on the table, deliver, fail (retryably and
// for good) and are stopped and started again. Meanwhile an operator ends
// the reader's connections (its lock's, the replica's), rotates the log,
// and purges it, which loses every saved position. The checks are the WAL
// test's (walModel.check): every committed event delivered, none rolled
// back sent, poison ones DEAD, none twice (every stop is clean, and a
// reader's killed connections lose it nothing it had not settled... but
// see binlogMayRepeat), per-key write order within a transaction, and a
// first send within walInterleaveBound of commit and due.
//
// `make fuzz STORAGE=mysql CAPTURE=binlog DURATION=10m SEED=…`.
func TestBinlogClaimsUnderRandomInterleavings(t *testing.T) {
	t.Parallel()
	var b *binlogTable
	runInterleaving(t, interleaving{
		leaseModes: []relay.LeaseMode{relay.LeaseAuto, relay.LeaseStatus}, // MySQL cannot hold claims
		setUp: func() deadReader {
			b = newBinlogTable(t)
			b.Exec(t, "CREATE TABLE hot (id INT PRIMARY KEY, n INT NOT NULL DEFAULT 0)")
			b.Exec(t, "INSERT INTO hot (id) VALUES (1), (2), (3)")
			return b
		},
		produce: func(m *walModel, r *rand.Rand) error {
			if err := binlogProduceOne(context.Background(), b, m, r); !lockConflict(err) {
				return err
			}
			return nil
		},
		operate: func(m *walModel, r *rand.Rand, stop <-chan struct{}) { operateBinlog(t, b, m, r, stop) },
		cycle: func(cfg relay.Config, pub publisher.Publisher, r *rand.Rand, stop <-chan struct{}) {
			cycleBinlogRelays(t, b, cfg, pub, r, stop)
		},
	})
}

// deadIDs are the table's DEAD events.
func (b *binlogTable) deadIDs() map[uuid.UUID]bool {
	rows, err := b.Store.DB().Query("SELECT event_id FROM openoutbox_events WHERE status = 'DEAD'")
	if err != nil {
		return nil
	}
	defer rows.Close()
	dead := map[uuid.UUID]bool{}
	for rows.Next() {
		var id []byte
		if rows.Scan(&id) == nil && len(id) == 16 {
			dead[uuid.UUID(id)] = true
		}
	}
	return dead
}

// lockConflict reports a deadlock or a lock wait that timed out: the
// server rolled the producer's transaction back.
func lockConflict(err error) bool {
	var my *gosql.MySQLError
	return errors.As(err, &my) && (my.Number == 1213 || my.Number == 1205)
}

// binlogProduceOne writes one transaction; one the server rolled back for
// a lock conflict (lockConflict) is counted as rolled back.
func binlogProduceOne(ctx context.Context, b *binlogTable, m *walModel, r *rand.Rand) (err error) {
	conn, err := b.Store.DB().Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if r.IntN(8) == 0 {
		return binlogProduceXA(ctx, conn, m, r)
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	n := 1 + r.IntN(5)
	if r.IntN(20) == 0 {
		n = 50 + r.IntN(250)
	}
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
	}
	defer func() {
		if lockConflict(err) {
			m.mu.Lock()
			for _, id := range ids {
				m.rolledBack[id] = true
			}
			m.mu.Unlock()
		}
	}()
	key := "NULL"
	keyName := ""
	if m.ordered && r.IntN(4) != 0 {
		keyName = fmt.Sprintf("k%d", r.IntN(5))
		key = "'" + keyName + "'"
	}
	poison := keyName == "" && r.IntN(25) == 0
	typ := "e"
	if poison {
		typ = "poison"
	}
	available := "UTC_TIMESTAMP(6)"
	if r.IntN(8) == 0 {
		available = fmt.Sprintf("UTC_TIMESTAMP(6) + INTERVAL %d MICROSECOND", (100+r.IntN(1500))*1000)
	}
	hold := time.Duration(0)
	switch {
	case r.IntN(30) == 0:
		hold = time.Duration(r.IntN(10000)) * time.Millisecond
	case r.IntN(3) == 0:
		hold = time.Duration(r.IntN(1500)) * time.Millisecond
	}
	// A row lock another producer may hold, taken between INSERTs: the
	// transaction waits with its seqs taken.
	hot := func() error {
		if r.IntN(3) != 0 {
			return nil
		}
		_, err := tx.ExecContext(ctx, "UPDATE hot SET n = n + 1 WHERE id = ?", 1+r.IntN(3))
		return err
	}
	cols := "(event_id, event_type, payload, available_at, partition_key)"
	var how string
	switch r.IntN(3) {
	case 0:
		how = "rows one by one"
		for i, id := range ids {
			if i > 0 && hold > 0 && n < 10 {
				time.Sleep(hold / time.Duration(n))
			}
			if err := hot(); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, "INSERT INTO openoutbox_events "+cols+" VALUES (?, '"+typ+"', 'x', "+available+", "+key+")", id[:]); err != nil {
				return err
			}
		}
	case 1:
		how = "one multi-row INSERT"
		if err := hot(); err != nil {
			return err
		}
		values := make([]string, n)
		args := make([]any, n)
		for i, id := range ids {
			values[i] = "(?, '" + typ + "', 'x', " + available + ", " + key + ")"
			args[i] = id[:]
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO openoutbox_events "+cols+" VALUES "+strings.Join(values, ", "), args...); err != nil {
			return err
		}
	default:
		how = "INSERT … SELECT"
		if err := hot(); err != nil {
			return err
		}
		selects := make([]string, n)
		args := make([]any, n)
		for i, id := range ids {
			selects[i] = fmt.Sprintf("SELECT ? AS id, %d AS n", i)
			args[i] = id[:]
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO openoutbox_events "+cols+" SELECT id, '"+typ+"', 'x', "+available+", "+key+
			" FROM ("+strings.Join(selects, " UNION ALL ")+") AS u ORDER BY n", args...); err != nil {
			return err
		}
	}
	m.kind(how)
	if err := hot(); err != nil {
		return err
	}
	due, err := binlogDueTimes(ctx, tx, ids)
	if err != nil {
		return err
	}
	if n >= 10 && hold > 0 {
		time.Sleep(hold)
	}
	if r.IntN(10) == 0 {
		if err := tx.Rollback(); err != nil {
			return err
		}
		m.mu.Lock()
		for _, id := range ids {
			m.rolledBack[id] = true
		}
		m.mu.Unlock()
		return nil
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	m.commit(ids, due, fmt.Sprintf("%s, %d rows, key %s, due %s, held %s", how, n, key, available, hold), keyName, poison)
	return nil
}

// binlogProduceXA writes one XA transaction, committed in two phases (or
// rolled back after its PREPARE) on its connection, held prepared a while:
// its rows are in the log from the PREPARE, committed only at the end.
func binlogProduceXA(ctx context.Context, conn *sql.Conn, m *walModel, r *rand.Rand) error {
	n := 1 + r.IntN(4)
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
	}
	xid := "x" + ids[0].String()[24:]
	exec := func(q string, args ...any) error { _, err := conn.ExecContext(ctx, q, args...); return err }
	if err := exec("XA START '" + xid + "'"); err != nil {
		return err
	}
	for _, id := range ids {
		if err := exec("INSERT INTO openoutbox_events (event_id, event_type, payload) VALUES (?, 'e', 'x')", id[:]); err != nil {
			_ = exec("XA END '" + xid + "'")
			_ = exec("XA ROLLBACK '" + xid + "'")
			return err
		}
	}
	if err := exec("XA END '" + xid + "'"); err != nil {
		return err
	}
	if err := exec("XA PREPARE '" + xid + "'"); err != nil {
		return err
	}
	time.Sleep(time.Duration(r.IntN(1500)) * time.Millisecond)
	m.kind("XA")
	if r.IntN(4) == 0 {
		if err := exec("XA ROLLBACK '" + xid + "'"); err != nil {
			return err
		}
		m.mu.Lock()
		for _, id := range ids {
			m.rolledBack[id] = true
		}
		m.mu.Unlock()
		return nil
	}
	if err := exec("XA COMMIT '" + xid + "'"); err != nil {
		return err
	}
	m.commit(ids, nil, fmt.Sprintf("XA, %d rows", n), "", false)
	return nil
}

// binlogDueTimes reads the rows' available_at in their transaction.
func binlogDueTimes(ctx context.Context, tx *sql.Tx, ids []uuid.UUID) (map[uuid.UUID]time.Time, error) {
	marks := make([]string, len(ids))
	args := make([]any, len(ids))
	for i, id := range ids {
		marks[i], args[i] = "?", id[:]
	}
	rows, err := tx.QueryContext(ctx, "SELECT event_id, available_at FROM openoutbox_events WHERE event_id IN ("+strings.Join(marks, ", ")+")", args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	due := map[uuid.UUID]time.Time{}
	for rows.Next() {
		var id []byte
		var at time.Time
		if err := rows.Scan(&id, &at); err != nil {
			return nil, err
		}
		due[uuid.UUID(id)] = at
	}
	return due, rows.Err()
}

// operateBinlog disturbs the log under the relays until stop.
func operateBinlog(t *testing.T, b *binlogTable, m *walModel, r *rand.Rand, stop <-chan struct{}) {
	db := b.Store.DB()
	for !stopped(stop) {
		pause(r, stop, 2500*time.Millisecond)
		if stopped(stop) {
			return
		}
		switch r.IntN(4) {
		case 0:
			// The reader's lock connection ends: it stops streaming
			// within a second, and a relay opens the log again.
			m.action("reader lock connection ended")
			if h := lockHolder(b); h.Valid {
				_, _ = db.Exec(fmt.Sprintf("KILL %d", h.Int64))
			}
		case 1:
			m.action("dump thread ended")
			rows, err := db.Query("SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'")
			if err != nil {
				t.Errorf("operator: %v", err)
				continue
			}
			var kill []int64
			for rows.Next() {
				var id int64
				if rows.Scan(&id) == nil {
					kill = append(kill, id)
				}
			}
			rows.Close()
			for _, id := range kill {
				_, _ = db.Exec(fmt.Sprintf("KILL %d", id))
			}
		case 2:
			m.action("log rotated")
			if _, err := db.Exec("FLUSH BINARY LOGS"); err != nil {
				t.Errorf("operator: %v", err)
			}
		case 3:
			if r.IntN(3) != 0 {
				continue
			}
			// Every saved position is gone: the relays must find it
			// out and deliver what was written since from the table.
			m.action("log purged")
			if _, err := db.Exec("FLUSH BINARY LOGS"); err != nil {
				t.Errorf("operator: %v", err)
			}
			var file string
			var rest [3]any
			if err := db.QueryRow("SHOW MASTER STATUS").Scan(&file, &rest[0], &rest[1], &rest[2]); err != nil {
				t.Errorf("operator: %v", err)
				continue
			}
			_, _ = db.Exec("PURGE BINARY LOGS TO '" + file + "'")
		}
	}
}

// cycleBinlogRelays runs one relay at a time until stop, each stopped
// cleanly after a while and started again, as a rolling restart does.
func cycleBinlogRelays(t *testing.T, b *binlogTable, cfg relay.Config, pub publisher.Publisher, r *rand.Rand, stop <-chan struct{}) {
	for !stopped(stop) {
		rl, err := startCycledBinlog(b, cfg, pub)
		if err != nil {
			t.Errorf("start a relay: %v", err)
			return
		}
		life := time.Duration(500+r.IntN(4500)) * time.Millisecond
		select {
		case <-stop:
		case <-rl.captureDone:
		case <-time.After(life):
		}
		if err := rl.stop(t); err != nil {
			var setup *binlog.SetupError
			if !errors.As(err, &setup) {
				t.Errorf("relay ended with %v", err)
			}
		}
		pause(r, stop, 300*time.Millisecond)
	}
}

func startCycledBinlog(b *binlogTable, cfg relay.Config, pub publisher.Publisher) (cycledRelay, error) {
	cfg.RelayID = "binlog-" + uuid.NewString()[:8]
	cfg.PollInterval = 50 * time.Millisecond
	cfg.Logger = testLogger()
	e, err := relay.New(cfg, b.Store, pub)
	if err != nil {
		return cycledRelay{}, err
	}
	return runCapture(e, b.source(cfg.RelayID), b.Store, binlogCaptureConfig(nil))
}
