package binlog_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/pkg/capture/binlog"
)

// ReadStatus says whether a reader streams, where its position is saved
// and how far the server's log has moved on since: bytes in the same
// file, files after a rotation.
func TestReadStatus(t *testing.T) {
	t.Parallel()
	server := startServer(t)
	tb, src := server.table(t)
	db := server.c.DB(t)
	ctx := context.Background()
	read := func() binlog.Status {
		t.Helper()
		st, err := binlog.ReadStatus(ctx, db, tb.Store.Database(), tb.Store.TableName())
		if err != nil {
			t.Fatal(err)
		}
		return st
	}

	st := read()
	if st.Saved || st.Streaming {
		t.Fatalf("before any reader: %+v, want nothing saved, nobody streaming", st)
	}
	if want := binlog.LockName(tb.Store.Database(), tb.Store.TableName()); st.Lock != want || !strings.HasPrefix(want, "outbox_relay.binlog.") {
		t.Errorf("Lock = %q, want %q", st.Lock, want)
	}

	stream, _ := open(t, src)
	st = read()
	// The save itself is logged: the server is a transaction ahead.
	if !st.Saved || !st.Streaming || st.Position.File != st.Current.File || st.BehindFiles != 0 ||
		st.BehindBytes != int64(st.Current.Pos-st.Position.Pos) {
		t.Fatalf("while a reader streams from the start: %+v", st)
	}
	if st.Server == "" || st.SavedAt.IsZero() || st.Age < 0 || st.Age > time.Minute {
		t.Errorf("saved position's server and time: %+v", st)
	}
	if err := stream.Close(ctx); err != nil {
		t.Fatal(err)
	}

	before := st.BehindBytes
	tb.InsertN(t, 3, "status")
	// The server ends the closed reader's session, and its lock, a moment
	// after the connection closes.
	eventually.True(t, 10*time.Second, func() bool { st = read(); return !st.Streaming },
		func() string { return fmt.Sprintf("the closed reader still streams: %+v", st) })
	if st.Streaming || st.BehindBytes <= before || st.BehindFiles != 0 || st.BehindBytes != int64(st.Current.Pos-st.Position.Pos) ||
		st.Current.GTID == st.Position.GTID {
		t.Fatalf("after inserts with no reader: %+v, want bytes behind in the same file and another GTID", st)
	}

	if _, err := db.ExecContext(ctx, "FLUSH BINARY LOGS"); err != nil {
		t.Fatal(err)
	}
	if st = read(); st.BehindFiles != 1 || st.BehindBytes != 0 {
		t.Fatalf("after a rotation: %+v, want 1 file behind", st)
	}
}

func TestLockNameFitsMySQL(t *testing.T) {
	t.Parallel()
	if n := binlog.LockName("app", strings.Repeat("t", 64)); n != binlog.LockName("app", strings.Repeat("t", 64)) || len(n) > 64 {
		t.Errorf("LockName of a long table: %q", n)
	}
	if n := binlog.LockName("app", "events"); n != "outbox_relay.binlog.app.events" {
		t.Errorf("LockName(app, events) = %q", n)
	}
}
