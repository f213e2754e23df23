package binlog_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/internal/harness/mysqltest"
	"github.com/outbox-relay/relay/internal/mycluster"
	"github.com/outbox-relay/relay/pkg/capture"
	"github.com/outbox-relay/relay/pkg/capture/binlog"
	"github.com/outbox-relay/relay/pkg/capture/capturetest"
)

// logServer is a MariaDB with its binary log on, private to one test: a
// test may purge its logs or kill its connections.
type logServer struct{ c *mycluster.Cluster }

func startServer(t *testing.T, args ...string) logServer {
	t.Helper()
	return logServer{mycluster.Start(t, mycluster.Options{Args: args})}
}

// table is a migrated outbox table on the server, and a Source reading it.
func (s logServer) table(t *testing.T) (*mysqltest.Table, binlog.Source) {
	t.Helper()
	tb := mysqltest.NewAt(t, s.c.URL(""))
	cfg := binlog.Config{Conn: tb.Store.ConnConfig(), Database: tb.Store.Database(), Table: tb.Store.TableName(),
		RelayID: t.Name(), SaveInterval: 20 * time.Millisecond, Heartbeat: time.Second}
	return tb, binlog.Source{Config: cfg}
}

type harness struct{ server logServer }

func (h harness) New(t *testing.T) capturetest.Setup {
	tb, src := h.server.table(t)
	return capturetest.Setup{
		Source: src,
		Insert: func(t testing.TB, n int) []uuid.UUID { return tb.Insert(t, make([]mysqltest.Event, n)...) },
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	capturetest.Run(t, harness{startServer(t)})
}

const wait = 20 * time.Second

var (
	open = capturetest.Open
	next = capturetest.Next
)

func ids(txn capture.Txn) []uuid.UUID {
	out := make([]uuid.UUID, len(txn.Events))
	for i := range txn.Events {
		out[i] = txn.Events[i].ID
	}
	return out
}

// Only the outbox table's fresh inserts are events: not another table's
// rows, not the relay's own updates and deletes, not a row written
// scheduled (the claims take it when due); a transaction arrives in
// commit order even when it began first, with its events' seqs and the
// seq that names it.
func TestOnlyFreshInsertsOfTheTableArriveInCommitOrder(t *testing.T) {
	t.Parallel()
	tb, src := startServer(t).table(t)
	st, start := open(t, src)
	if !start.Created || start.Position == "" {
		t.Fatalf("first open: %+v", start)
	}
	tb.Exec(t, "CREATE TABLE other (id INT PRIMARY KEY)")
	db := tb.Store.DB()
	early, err := db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer early.Rollback()
	if _, err := early.Exec("INSERT INTO openoutbox_events (event_type, payload) VALUES ('early', 'x')"); err != nil {
		t.Fatal(err)
	}
	tb.Exec(t, "INSERT INTO other VALUES (1)")
	tb.Insert(t, mysqltest.Event{AvailableIn: time.Hour})
	late := tb.Insert(t, mysqltest.Event{Type: "late", PartitionKey: "k"})
	tb.Exec(t, "UPDATE openoutbox_events SET attempts = attempts + 1 WHERE event_id = ?", late[0][:])
	tb.Exec(t, "DELETE FROM openoutbox_events WHERE event_id = ?", late[0][:])
	if err := early.Commit(); err != nil {
		t.Fatal(err)
	}
	first := next(t, st)
	if got := ids(first); len(got) != 1 || got[0] != late[0] {
		t.Fatalf("first transaction %v, want the later-begun one %v", got, late)
	}
	if ev := first.Events[0]; ev.Type != "late" || ev.PartitionKey != "k" || first.Seqs[0] <= 0 || first.ID != fmt.Sprint(first.Seqs[0]) {
		t.Fatalf("event %+v seqs %v id %q", ev, first.Seqs, first.ID)
	}
	second := next(t, st)
	if len(second.Events) != 1 || second.Events[0].Type != "early" || second.Seqs[0] >= first.Seqs[0] {
		t.Fatalf("second transaction %+v seqs %v", second.Events, second.Seqs)
	}
}

// A restart after writes made while no reader ran sends each of them once
// and nothing settled before (issue 43's "nothing twice").
func TestRestartAfterWritesWhileDownSendsEachOnce(t *testing.T) {
	t.Parallel()
	tb, src := startServer(t).table(t)
	st, _ := open(t, src)
	before := tb.Insert(t, make([]mysqltest.Event, 2)...)
	txn := next(t, st)
	if len(txn.Events) != len(before) {
		t.Fatalf("got %d events, want %d", len(txn.Events), len(before))
	}
	txn.Ack()
	if err := st.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	var down []uuid.UUID
	for range 5 {
		down = append(down, tb.Insert(t, mysqltest.Event{})...)
	}
	st2, start := open(t, src)
	if start.Created {
		t.Fatal("reopening made a new position")
	}
	var got []uuid.UUID
	for len(got) < len(down) {
		txn := next(t, st2)
		got = append(got, ids(txn)...)
		txn.Ack()
	}
	for i := range down {
		if got[i] != down[i] {
			t.Fatalf("event %d is %s, want %s (sent: %v)", i, got[i], down[i], got)
		}
	}
	select {
	case txn := <-st2.Txns():
		t.Fatalf("an event came twice: %v", ids(txn))
	case <-time.After(300 * time.Millisecond):
	}
}

// A standby takes over within seconds once the reader's connection dies.
func TestStandbyTakesOverWhenTheReaderDies(t *testing.T) {
	t.Parallel()
	tb, src := startServer(t).table(t)
	st, _ := open(t, src)
	if _, _, err := src.Open(context.Background()); !errors.Is(err, capture.ErrBusy) {
		t.Fatalf("second reader: %v, want ErrBusy", err)
	}
	// Kill the reader's connections (the lock's and the replica's), as a
	// crashed relay's would end.
	killReaders(t, tb.Store.DB(), src.Config.ServerID)
	deadline := time.Now().Add(wait)
	for {
		st2, _, err := src.Open(context.Background())
		if err == nil {
			defer st2.Close(context.Background())
			break
		}
		if !errors.Is(err, capture.ErrBusy) || time.Now().After(deadline) {
			t.Fatalf("standby: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for range st.Txns() {
	}
	if st.Err() == nil {
		t.Fatal("the killed reader's stream ended without an error")
	}
}

// killReaders kills the connection that holds the reader lock: the
// reader, which pings it, ends its stream, and a standby may read.
func killReaders(t *testing.T, db *sql.DB, _ uint32) {
	t.Helper()
	rows, err := db.Query("SELECT IS_USED_LOCK(CONCAT('outbox_relay.binlog.', DATABASE(), '.openoutbox_events'))")
	if err != nil {
		t.Fatal(err)
	}
	var idsToKill []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		idsToKill = append(idsToKill, id)
	}
	rows.Close()
	if len(idsToKill) == 0 {
		t.Fatal("no reader connection found")
	}
	for _, id := range idsToKill {
		_, _ = db.Exec(fmt.Sprintf("KILL %d", id))
	}
}

// The saved position moves with unrelated transactions while the outbox
// is idle, so a restart does not replay them.
func TestIdleOutboxOnABusyServerKeepsItsPositionCurrent(t *testing.T) {
	t.Parallel()
	tb, src := startServer(t).table(t)
	st, _ := open(t, src)
	tb.Exec(t, "CREATE TABLE busy (id INT PRIMARY KEY)")
	var was string
	read := func() string {
		var p string
		if err := tb.Store.DB().QueryRow("SELECT CONCAT(gtid, ' ', binlog_file, ':', binlog_pos) FROM outbox_relay_positions WHERE outbox_table = CONCAT(DATABASE(), '.openoutbox_events')").Scan(&p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	was = read()
	for i := range 20 {
		tb.Exec(t, fmt.Sprintf("INSERT INTO busy VALUES (%d)", i))
	}
	deadline := time.Now().Add(wait)
	for read() == was {
		if time.Now().After(deadline) {
			t.Fatalf("the saved position stayed at %s", was)
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = st
}

// A position the server has purged from its logs is ErrLost, never a
// silent skip.
func TestPurgedPositionIsLost(t *testing.T) {
	t.Parallel()
	tb, src := startServer(t).table(t)
	st, _ := open(t, src)
	if err := st.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	tb.Insert(t, mysqltest.Event{})
	// Purge every log file but the newest, which then begins after the
	// saved position.
	tb.Exec(t, "FLUSH BINARY LOGS")
	var file string
	var pos any
	row := tb.Store.DB().QueryRow("SHOW MASTER STATUS")
	cols := make([]any, 4)
	cols[0], cols[1] = &file, &pos
	for i := 2; i < 4; i++ {
		cols[i] = new(any)
	}
	if err := row.Scan(cols...); err != nil {
		t.Fatal(err)
	}
	// A reader that closed a moment ago may still hold its file open on
	// the server, which then keeps it.
	deadline := time.Now().Add(wait)
	for {
		tb.Exec(t, "PURGE BINARY LOGS TO '"+file+"'")
		var n int
		if err := tb.Store.DB().QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		var files []string
		rows, err := tb.Store.DB().Query("SHOW BINARY LOGS")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var name string
			var size any
			_ = rows.Scan(&name, &size)
			files = append(files, name)
		}
		rows.Close()
		if len(files) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server keeps %v (%d dump threads)", files, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	st2, _, err := src.Open(context.Background())
	if err == nil {
		for txn := range st2.Txns() {
			t.Logf("got %v", ids(txn))
		}
		err = st2.Err()
	}
	if !errors.Is(err, capture.ErrLost) {
		t.Fatalf("open after purge: %v, want ErrLost", err)
	}
	if !strings.Contains(err.Error(), "purged") {
		t.Errorf("the error does not say the log was purged: %v", err)
	}
}

// A server that logs statements, or partial row images, is refused with
// the setting named, before any stream starts.
func TestWrongLogSettingsAreRefusedByName(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ arg, want string }{
		{"--binlog-format=STATEMENT", "binlog_format=STATEMENT"},
		{"--binlog-format=MIXED", "binlog_format=MIXED"},
		{"--binlog-row-image=MINIMAL", "binlog_row_image=MINIMAL"},
		{"--skip-log-bin", "log_bin=OFF"},
	} {
		t.Run(c.arg, func(t *testing.T) {
			t.Parallel()
			server := startServer(t, c.arg)
			// InnoDB at READ COMMITTED refuses the migrate's statements
			// under STATEMENT: the table is made while the server logs
			// rows, and the server switched back.
			db := server.c.DB(t)
			var format string
			if err := db.QueryRow("SELECT @@global.binlog_format").Scan(&format); err != nil {
				t.Fatal(err)
			}
			setFormat := func(f string) {
				if _, err := db.Exec("SET GLOBAL binlog_format = '" + f + "'"); err != nil {
					t.Fatal(err)
				}
			}
			if format == "STATEMENT" {
				setFormat("ROW")
			}
			_, src := server.table(t)
			if format == "STATEMENT" {
				setFormat(format)
			}
			err := binlog.CheckServer(context.Background(), src.Config)
			var setup *capture.SetupError
			if !errors.As(err, &setup) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("CheckServer: %v, want a setup error naming %s", err, c.want)
			}
			if _, _, err := src.Open(context.Background()); !errors.As(err, &setup) {
				t.Fatalf("Open: %v, want the setup error", err)
			}
		})
	}
}

// An XA transaction's rows are logged at its XA PREPARE and committed by
// a later XA COMMIT: they arrive at the commit, never after a rollback,
// and the settled position stays before a prepared transaction, so that a
// restart between its PREPARE and its COMMIT still delivers it. (They were
// sent at the XA END, as if committed.)
func TestXATransactionsArriveAtTheirCommit(t *testing.T) {
	t.Parallel()
	tb, src := startServer(t).table(t)
	st, _ := open(t, src)
	db := tb.Store.DB()
	xa := func(xid string, id uuid.UUID) *sql.Conn {
		t.Helper()
		conn, err := db.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		for _, q := range []string{"XA START '" + xid + "'", "INSERT INTO openoutbox_events (event_id, event_type, payload) VALUES (?, 'xa', 'x')",
			"XA END '" + xid + "'", "XA PREPARE '" + xid + "'"} {
			var args []any
			if strings.HasPrefix(q, "INSERT") {
				args = append(args, id[:])
			}
			if _, err := conn.ExecContext(context.Background(), q, args...); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		return conn
	}
	rolled, committed, later := uuid.New(), uuid.New(), uuid.New()
	run := func(conn *sql.Conn, q string) {
		t.Helper()
		// MariaDB ends a prepared XA transaction on its own connection
		// while that one lives.
		if _, err := conn.ExecContext(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	rolledConn := xa("rolled", rolled)
	committedConn := xa("committed", committed)
	plain := tb.Insert(t, mysqltest.Event{})
	if got := ids(next(t, st)); len(got) != 1 || got[0] != plain[0] {
		t.Fatalf("first transaction %v, want the plain one %v: a prepared one went before its commit", got, plain)
	}
	run(rolledConn, "XA ROLLBACK 'rolled'")
	run(committedConn, "XA COMMIT 'committed'")
	txn := next(t, st)
	if got := ids(txn); len(got) != 1 || got[0] != committed {
		t.Fatalf("after the commit got %v, want %v", got, committed)
	}
	txn.Ack()
	// Restart between a PREPARE and its COMMIT: the event still comes.
	laterConn := xa("later", later)
	tb.Insert(t, mysqltest.Event{})
	next(t, st).Ack()
	if err := st.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	run(laterConn, "XA COMMIT 'later'")
	st2, _ := open(t, src)
	for {
		txn := next(t, st2)
		if got := ids(txn); len(got) == 1 && got[0] == later {
			break
		} else if len(got) == 1 && got[0] == rolled {
			t.Fatal("the rolled-back event arrived")
		}
	}
}

// No new position is made while an XA transaction is prepared: its rows
// lie before the position, and only its commit after.
func TestNoPositionIsMadeWhileAnXATransactionIsPrepared(t *testing.T) {
	t.Parallel()
	tb, src := startServer(t).table(t)
	conn, err := tb.Store.DB().Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{"XA START 'p'", "INSERT INTO openoutbox_events (event_type, payload) VALUES ('xa', 'x')", "XA END 'p'", "XA PREPARE 'p'"} {
		if _, err := conn.ExecContext(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := src.Open(context.Background()); err == nil || !strings.Contains(err.Error(), "XA") {
		t.Fatalf("Open with an XA transaction prepared: %v, want a wait naming it", err)
	}
	if _, err := conn.ExecContext(context.Background(), "XA COMMIT 'p'"); err != nil {
		t.Fatal(err)
	}
	open(t, src)
}

// A column added to the table while a reader streams: its rows grow
// wider, the reader reads the table's columns again and goes on. (It
// asked its own pool, whose one connection holds the reader lock, and
// waited for ever.)
func TestAColumnAddedWhileStreamingIsReadAgain(t *testing.T) {
	t.Parallel()
	tb, src := startServer(t).table(t)
	st, _ := open(t, src)
	tb.Exec(t, "ALTER TABLE openoutbox_events ADD COLUMN tenant VARCHAR(32) NULL FIRST")
	want := tb.Insert(t, mysqltest.Event{Type: "after.alter"})
	txn := next(t, st)
	if got := ids(txn); len(got) != 1 || got[0] != want[0] || txn.Events[0].Type != "after.alter" {
		t.Fatalf("after the ALTER got %v (%+v), want %v", got, txn.Events, want)
	}
}

// With binlog_row_metadata=FULL the log names each row's columns: rows
// written before an ALTER that moved the columns are read by their own
// names, also when the reader starts after the ALTER.
func TestRowsAreReadByTheNamesTheLogGives(t *testing.T) {
	t.Parallel()
	tb, src := startServer(t, "--binlog-row-metadata=FULL").table(t)
	st, _ := open(t, src)
	before := tb.Insert(t, mysqltest.Event{Type: "before.alter"})
	next(t, st).Ack()
	if err := st.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	unsettled := tb.Insert(t, mysqltest.Event{Type: "unsettled"})
	tb.Exec(t, "ALTER TABLE openoutbox_events MODIFY event_type VARCHAR(255) NOT NULL FIRST")
	st2, _ := open(t, src)
	txn := next(t, st2)
	if got := ids(txn); len(got) != 1 || got[0] != unsettled[0] || txn.Events[0].Type != "unsettled" {
		t.Fatalf("the row written before the ALTER read as %+v, want %v (before it: %v)", txn.Events, unsettled, before)
	}
}

// Without the log's column names, an ALTER that moves a column while the
// reader streams is met in the log: the rows after it are read by the
// table's new order.
func TestAColumnMovedWhileStreamingIsReadAgain(t *testing.T) {
	t.Parallel()
	tb, src := startServer(t).table(t)
	st, _ := open(t, src)
	tb.Exec(t, "ALTER TABLE openoutbox_events MODIFY event_type VARCHAR(255) NOT NULL FIRST")
	want := tb.Insert(t, mysqltest.Event{Type: "after.move"})
	txn := next(t, st)
	if got := ids(txn); len(got) != 1 || got[0] != want[0] || txn.Events[0].Type != "after.move" {
		t.Fatalf("after the ALTER got %+v, want %v", txn.Events, want)
	}
}
