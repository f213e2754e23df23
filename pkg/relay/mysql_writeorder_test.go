package relay_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/outbox-relay/relay/internal/harness/mysqltest"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/mysql"
)

// Issue 20's write-order scenarios (writeorder_test.go) on MySQL/MariaDB.
// The table's created_at default, UTC_TIMESTAMP(6), is the time of the
// insert statement, not of the transaction's start, so the producers here
// stamp created_at themselves when their transaction begins (SET @t first,
// created_at = @t in the insert), as a producer that takes its timestamp
// at the start of its unit of work does.

func TestMySQLPartitionOrderIsWriteOrderNotTransactionStart(t *testing.T) {
	t.Parallel()
	for name, running := range map[string]bool{"relay stopped": false, "relay running": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			writeOrderNotStartOrder(t, newMySQLWriteOrder(t), running)
		})
	}
}

func TestMySQLPartitionOrderFollowsTheApplicationsRowLock(t *testing.T) {
	t.Parallel()
	writeOrderFollowsRowLock(t, newMySQLWriteOrder(t))
}

// mysqlWriteOrder is writeOrderDB on MySQL/MariaDB.
type mysqlWriteOrder struct {
	*mysqltest.Table
	// app is the application's pool, apart from the relays'.
	app      *sql.DB
	accounts string
}

func newMySQLWriteOrder(t *testing.T) *mysqlWriteOrder {
	t.Helper()
	tb := mysqltest.New(t)
	app, err := mysql.Open(context.Background(), tb.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(app.Close)
	return &mysqlWriteOrder{Table: tb, app: app.DB(), accounts: tb.Database + ".accounts"}
}

func (db *mysqlWriteOrder) queue() storage.Queue { return db.Store }

func (db *mysqlWriteOrder) insertSQL() string {
	return "INSERT INTO " + db.Name + " (event_type, partition_key, payload, created_at) VALUES (?, ?, ?, @t)"
}

type mysqlAppTx struct {
	db *mysqlWriteOrder
	tx *sql.Tx
}

// stampStart is the producer's first statement: it takes the moment its
// events will carry as created_at.
const stampStart = "SET @t = UTC_TIMESTAMP(6)"

func (db *mysqlWriteOrder) begin(t *testing.T) appTx {
	t.Helper()
	tx, err := db.app.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	if _, err := tx.Exec(stampStart); err != nil {
		t.Fatal(err)
	}
	return mysqlAppTx{db, tx}
}

func (a mysqlAppTx) insert(t *testing.T, key string, n int) {
	t.Helper()
	if _, err := a.tx.Exec(a.db.insertSQL(), startOrderEventType, key, keyedPayload(key, n)); err != nil {
		t.Fatalf("insert event %d: %v", n, err)
	}
}

func (a mysqlAppTx) commit(t *testing.T) {
	t.Helper()
	if err := a.tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

func (db *mysqlWriteOrder) createAccounts(t *testing.T, keys []string) {
	t.Helper()
	db.Exec(t, "CREATE TABLE "+db.accounts+" (id VARCHAR(64) PRIMARY KEY, v INT NOT NULL) ENGINE = InnoDB")
	values := strings.TrimSuffix(strings.Repeat("(?, -1), ", len(keys)), ", ")
	args := make([]any, len(keys))
	for i, k := range keys {
		args[i] = k
	}
	db.Exec(t, "INSERT INTO "+db.accounts+" (id, v) VALUES "+values, args...)
}

// transfer retries a transaction InnoDB chose as a deadlock victim, as an
// application must: its inserts' locks on the outbox indexes can meet a
// relay's claim. The rolled-back attempt took no number, so numbers stay
// in lock order.
func (db *mysqlWriteOrder) transfer(ctx context.Context, key string, pause func()) error {
	for {
		err := db.transferOnce(ctx, key, pause)
		var me *mysqldriver.MySQLError
		if errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205) {
			continue
		}
		return err
	}
}

func (db *mysqlWriteOrder) transferOnce(ctx context.Context, key string, pause func()) error {
	tx, err := db.app.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, stampStart); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	pause()
	var v int
	if err := tx.QueryRowContext(ctx, "SELECT v FROM "+db.accounts+" WHERE id = ? FOR UPDATE", key).Scan(&v); err != nil {
		return fmt.Errorf("lock %s: %w", key, err)
	}
	v++
	if _, err := tx.ExecContext(ctx, "UPDATE "+db.accounts+" SET v = ? WHERE id = ?", v, key); err != nil {
		return fmt.Errorf("count %s: %w", key, err)
	}
	if _, err := tx.ExecContext(ctx, db.insertSQL(), rowLockEventType, key, keyedPayload(key, v)); err != nil {
		return fmt.Errorf("insert %s %d: %w", key, v, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

func (db *mysqlWriteOrder) written(t *testing.T) []writtenEvent {
	t.Helper()
	rows, err := db.Store.DB().Query("SELECT payload, created_at FROM " + db.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []writtenEvent
	for rows.Next() {
		var e writtenEvent
		var payload []byte
		if err := rows.Scan(&payload, &e.CreatedAt); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(payload, &e.keyedEvent); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
