package binlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outbox-relay/relay/pkg/capture"
	"github.com/outbox-relay/relay/pkg/outbox"
)

// reader is one open stream (capture.Stream).
type reader struct {
	cfg    Config
	srv    server
	db     *sql.DB   // the reader's pool: conn and nothing else
	conn   *sql.Conn // holds the reader lock; saves the position
	syncer *replication.BinlogSyncer
	stream *replication.BinlogStreamer
	first  *replication.BinlogEvent // read by startSync, not yet handled
	log    *slog.Logger

	out    chan capture.Txn
	cancel context.CancelFunc
	done   chan struct{} // closed when the read loop has returned
	saved  chan struct{} // closed when the saver has returned
	err    error         // why the stream ended; set before out is closed

	acks    acks
	layout  layout
	logged  []string // the column names the log last gave, with binlog_row_metadata=FULL
	closeMu sync.Mutex
	closed  bool
}

// open takes the reader lock and starts the stream.
func open(ctx context.Context, cfg Config) (r *reader, start capture.Start, err error) {
	db, err := cfg.open(1)
	if err != nil {
		return nil, start, err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		_ = db.Close()
		return nil, start, fmt.Errorf("connect for the binlog: %w", err)
	}
	defer func() {
		if err != nil {
			_ = conn.Close()
			_ = db.Close()
		}
	}()
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)", cfg.lockName()).Scan(&got); err != nil {
		return nil, start, fmt.Errorf("take the binlog reader's lock: %w", err)
	}
	if got.Int64 != 1 {
		return nil, start, ErrBusy
	}
	srv, err := checkServer(ctx, conn)
	if err != nil {
		return nil, start, err
	}
	if !srv.rowMetadata {
		cfg.Logger.Warn("binlog_row_metadata is not FULL: the log does not name its rows' columns, so an ALTER TABLE of the outbox that moves columns while rows of the old shape are still to be read may be read wrongly; set binlog_row_metadata=FULL")
	}
	names, err := tableColumns(ctx, conn, cfg.Database, cfg.Table)
	if err != nil {
		return nil, start, err
	}
	lay, err := layoutOf(names)
	if err != nil {
		return nil, start, &SetupError{Problem: err.Error(), Fix: "run relay-cli migrate"}
	}
	if err := createPositionTable(ctx, conn); err != nil {
		return nil, start, err
	}
	pos, savedServer, ok, err := savedPosition(ctx, conn, cfg.key())
	if err != nil {
		return nil, start, err
	}
	switch {
	case !ok:
		if pos, err = currentPosition(ctx, conn, srv); err != nil {
			return nil, start, err
		}
		if err := noPreparedXA(ctx, conn, cfg.Logger); err != nil {
			return nil, start, err
		}
		// Saved at once: a reader that dies before its first
		// acknowledgement starts here again, not after a gap.
		if err := savePosition(ctx, conn, cfg.key(), pos, srv.id); err != nil {
			return nil, start, err
		}
		start.Created = true
	case pos.GTID == "" && savedServer != srv.id:
		// A file and offset mean nothing on another server.
		return nil, start, fmt.Errorf("%w: the saved position %s is of %s, not of this server (%s)", ErrLost, pos, savedServer, srv.id)
	}
	start.Position, start.Server = pos.String(), srv.id

	r = &reader{cfg: cfg, srv: srv, db: db, conn: conn, log: cfg.Logger, layout: lay,
		out: make(chan capture.Txn, 64), done: make(chan struct{}), saved: make(chan struct{})}
	r.acks.settled = pos
	if err := r.startSync(ctx, pos); err != nil {
		return nil, start, err
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.cancel = cancel
	go r.read(rctx, pos)
	go r.save(rctx)
	return r, start, nil
}

// noPreparedXA fails while an XA transaction is prepared and not yet
// committed or rolled back. Read after the position: such a transaction
// logged its rows before the position, and only its XA COMMIT comes after,
// so the stream would never see them; one that prepares later is in the
// stream, and one that committed meanwhile is visible to the claims'
// backfill. A user who may not list them (MySQL 8 without
// XA_RECOVER_ADMIN) is warned.
func noPreparedXA(ctx context.Context, q querier, log *slog.Logger) error {
	rows, err := q.QueryContext(ctx, "XA RECOVER")
	if err != nil {
		log.Warn("cannot list prepared XA transactions (XA RECOVER); a producer's XA transaction prepared before the new binlog position would be left to the claims",
			"error", err)
		return nil
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		n++
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("list prepared XA transactions: %w", err)
	}
	if n > 0 {
		return fmt.Errorf("waiting for %d prepared XA transactions (XA RECOVER) to commit or roll back before making a binlog position", n)
	}
	return nil
}

// startSync connects as a replica and asks for the log after pos; a
// position the server no longer has is ErrLost.
func (r *reader) startSync(ctx context.Context, pos position) error {
	c := r.cfg.Conn
	sc := replication.BinlogSyncerConfig{
		ServerID:            r.cfg.ServerID,
		Flavor:              r.srv.flavor,
		User:                c.User,
		Password:            c.Passwd,
		TLSConfig:           c.TLS,
		ParseTime:           false,
		HeartbeatPeriod:     r.cfg.Heartbeat,
		ReadTimeout:         3 * r.cfg.Heartbeat,
		DisableRetrySync:    true,
		Logger:              slog.New(slog.DiscardHandler),
		RowsEventDecodeFunc: r.decodeRows,
	}
	if c.Net == "unix" {
		addr := c.Addr
		sc.Host = "localhost"
		sc.Dialer = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", addr)
		}
	} else {
		host, port, err := net.SplitHostPort(c.Addr)
		if err != nil {
			return fmt.Errorf("binlog: the storage's address %q: %w", c.Addr, err)
		}
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			return fmt.Errorf("binlog: the storage's port %q: %w", port, err)
		}
		sc.Host, sc.Port = host, uint16(n)
	}
	r.syncer = replication.NewBinlogSyncer(sc)
	var err error
	if pos.GTID != "" {
		var set gomysql.GTIDSet
		if set, err = gomysql.ParseGTIDSet(r.srv.flavor, pos.GTID); err != nil {
			r.syncer.Close()
			return fmt.Errorf("%w: the saved GTID position %q cannot be read: %v", ErrLost, pos.GTID, err)
		}
		r.stream, err = r.syncer.StartSyncGTID(set)
	} else {
		r.stream, err = r.syncer.StartSync(gomysql.Position{Name: pos.File, Pos: pos.Pos})
	}
	if err != nil {
		r.syncer.Close()
		return r.syncError(err)
	}
	// The server answers a position it does not have at once, with an
	// error in place of the log's first event.
	first, cancel := context.WithTimeout(ctx, 3*r.cfg.Heartbeat)
	defer cancel()
	if r.first, err = r.stream.GetEvent(first); err != nil {
		r.syncer.Close()
		return r.syncError(err)
	}
	return nil
}

// syncError names what a replica's connection failure means.
func (r *reader) syncError(err error) error {
	var my *gomysql.MyError
	if errors.As(err, &my) {
		switch my.Code {
		case errBinlogUnreadable:
			return fmt.Errorf("%w: the server no longer has the log from the saved position (purged, or of another server): %s", ErrLost, my.Message)
		case errSpecificAccess, 1045:
			return &SetupError{Problem: "the relay's user may not read the binary log: " + my.Message,
				Fix: "grant it REPLICATION SLAVE and REPLICATION CLIENT (BINLOG MONITOR on MariaDB 10.5+): relay-cli grants --capture binlog"}
		}
	}
	return fmt.Errorf("read the binlog: %w", err)
}

// Txns delivers the committed transactions with outbox events.
func (r *reader) Txns() <-chan capture.Txn { return r.out }

// Err is why the stream ended.
func (r *reader) Err() error { return r.err }

// Close stops streaming, saves the settled position and releases the
// reader lock.
func (r *reader) Close(ctx context.Context) error {
	r.closeMu.Lock()
	if r.closed {
		r.closeMu.Unlock()
		return nil
	}
	r.closed = true
	r.closeMu.Unlock()
	r.cancel()
	r.syncer.Close()
	<-r.done
	<-r.saved
	err := r.flush(ctx)
	_ = r.conn.Close() // releases the lock
	_ = r.db.Close()
	return err
}

// flush saves the settled position when it moved.
func (r *reader) flush(ctx context.Context) error {
	pos, moved := r.acks.take()
	if !moved {
		return nil
	}
	if err := savePosition(ctx, r.conn, r.cfg.key(), pos, r.srv.id); err != nil {
		r.acks.untake(pos)
		return err
	}
	return nil
}

// save writes the settled position every SaveInterval while it moves,
// and otherwise pings the reader lock's connection: a reader whose lock
// connection died ends its stream, since another may read now.
func (r *reader) save(ctx context.Context) {
	defer close(r.saved)
	t := time.NewTicker(r.cfg.SaveInterval)
	defer t.Stop()
	idle := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_, moved := r.acks.peek()
		var err error
		idle++
		switch {
		case moved:
			idle = 0
			err = r.flush(ctx)
		case time.Duration(idle)*r.cfg.SaveInterval >= time.Second:
			idle = 0
			err = r.conn.PingContext(ctx)
		}
		if err != nil && ctx.Err() == nil {
			r.log.Warn("the binlog reader's connection failed; ending the stream", "error", err)
			r.fail(fmt.Errorf("the reader lock's connection: %w", err))
			return
		}
	}
}

// fail ends the stream with err.
func (r *reader) fail(err error) {
	r.closeMu.Lock()
	if r.err == nil {
		r.err = err
	}
	r.closeMu.Unlock()
	r.syncer.Close()
}

// txnState is the transaction being read.
type txnState struct {
	open   bool
	events []outbox.Event
	seqs   []int64
	// other is true when it wrote a table other than the positions'.
	other bool
	// xid names an XA transaction, as the log writes it, from its XA END.
	xid string
}

// prepared is an XA transaction the log holds up to its XA PREPARE: its
// rows are logged there, but committed only by a later XA COMMIT, or
// rolled back. Its entry keeps the settled position before it until then,
// so that a restart reads its rows again.
type prepared struct {
	t     txnState
	entry *ackEntry
}

// xaStatement is what an XA statement in the log does, and to which
// transaction.
func xaStatement(q string) (verb, xid string) {
	for _, v := range []string{"XA START", "XA END", "XA COMMIT", "XA ROLLBACK"} {
		if rest, ok := strings.CutPrefix(q, v+" "); ok {
			return v, strings.TrimSpace(rest)
		}
	}
	return "", ""
}

// read turns the log's events into transactions until the stream ends.
func (r *reader) read(ctx context.Context, from position) {
	defer close(r.done)
	defer close(r.out)
	var (
		t       txnState
		file    = from.File
		pending = map[string]prepared{}
	)
	// emit sends ts's events as a committed transaction, settled once
	// every entry is.
	emit := func(ts txnState, entries ...*ackEntry) bool {
		txn := capture.Txn{Events: ts.events, Seqs: ts.seqs, ID: strconv.FormatInt(ts.seqs[0], 10),
			Ack: func() {
				for _, e := range entries {
					r.acks.ack(e)
				}
			}}
		select {
		case r.out <- txn:
			return true
		case <-ctx.Done():
			return false
		}
	}
	end := func(pos position) bool {
		defer func() { t = txnState{} }()
		if len(t.events) == 0 {
			if t.other || !t.open {
				r.acks.add(pos, true)
			}
			return true
		}
		return emit(t, r.acks.add(pos, false))
	}
	for {
		ev, err := r.first, error(nil)
		if r.first != nil {
			r.first = nil
		} else {
			ev, err = r.stream.GetEvent(ctx)
		}
		if err != nil {
			r.closeMu.Lock()
			if r.err == nil && ctx.Err() == nil {
				r.err = r.syncError(err)
			}
			r.closeMu.Unlock()
			return
		}
		pos := func(set gomysql.GTIDSet) position { return r.positionAt(file, ev.Header.LogPos, set) }
		switch e := ev.Event.(type) {
		case *replication.RotateEvent:
			file = string(e.NextLogName)
		case *replication.GTIDEvent, *replication.MariadbGTIDEvent:
			t = txnState{open: true}
		case *replication.GenericEvent:
			if ev.Header.EventType == replication.XA_PREPARE_LOG_EVENT {
				// Prepared, not committed: held until its XA COMMIT.
				pending[t.xid] = prepared{t: t, entry: r.acks.add(pos(nil), false)}
				t = txnState{}
			}
		case *replication.QueryEvent:
			q := string(e.Query)
			verb, xid := xaStatement(q)
			switch {
			case q == "BEGIN" || verb == "XA START":
				t.open = true
			case verb == "XA END":
				t.xid = xid
			case verb == "XA COMMIT" || verb == "XA ROLLBACK":
				p, ok := pending[xid]
				delete(pending, xid)
				if !ok {
					// Prepared before the stream's position; Open makes
					// no position while one is (see waitForPrepared).
					r.log.Warn("the binlog commits an XA transaction prepared before the reader's position; its events are left to the claims",
						"xid", xid)
					r.acks.add(pos(e.GSet), true)
					t = txnState{}
					continue
				}
				if verb == "XA ROLLBACK" || len(p.t.events) == 0 {
					r.acks.ack(p.entry)
					r.acks.add(pos(e.GSet), true)
					t = txnState{}
					continue
				}
				commit := r.acks.add(pos(e.GSet), false)
				t = txnState{}
				if !emit(p.t, p.entry, commit) {
					return
				}
			case q == "COMMIT":
				if !end(pos(e.GSet)) {
					return
				}
			default:
				// A statement that is its own transaction (DDL).
				t.other = true
				if r.logged == nil && r.altersTable(e) {
					// Without the log's column names, the rows after
					// it are read by the table's columns as they are now.
					if err := r.readColumns(); err != nil {
						r.fail(err)
						return
					}
				}
				if !end(pos(e.GSet)) {
					return
				}
			}
		case *replication.RowsEvent:
			if string(e.Table.Schema) != r.cfg.Database || string(e.Table.Table) != PositionTable {
				t.other = true
			}
			if len(e.Rows) > 0 {
				if err := r.rows(e, &t); err != nil {
					r.fail(err)
					return
				}
			}
		case *replication.XIDEvent:
			if !end(pos(e.GSet)) {
				return
			}
		}
	}
}

// positionAt is the position after an event that ends a transaction.
func (r *reader) positionAt(file string, logPos uint32, set gomysql.GTIDSet) position {
	p := position{File: file, Pos: logPos}
	if set != nil {
		p.GTID = set.String()
	} else {
		p.GTID = r.acks.lastGTID()
	}
	return p
}

// readColumns reads the outbox table's columns again, on the lock's
// connection: the reader's pool has no other.
func (r *reader) readColumns() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	names, err := tableColumns(ctx, r.conn, r.cfg.Database, r.cfg.Table)
	if err != nil {
		return err
	}
	l, err := layoutOf(names)
	if err != nil {
		return &SetupError{Problem: err.Error(), Fix: "run relay-cli migrate"}
	}
	r.layout = l
	return nil
}

// altersTable reports whether a statement of the log may change the
// outbox table's columns: an ALTER TABLE naming it, in its database.
func (r *reader) altersTable(e *replication.QueryEvent) bool {
	q := strings.ToLower(string(e.Query))
	if !strings.Contains(q, "alter") || !strings.Contains(q, strings.ToLower(r.cfg.Table)) {
		return false
	}
	schema := string(e.Schema)
	return schema == r.cfg.Database || strings.Contains(q, strings.ToLower(r.cfg.Database))
}

// ours reports whether a table map is the outbox table's.
func (r *reader) ours(t *replication.TableMapEvent) bool {
	return t != nil && string(t.Schema) == r.cfg.Database && string(t.Table) == r.cfg.Table
}

// decodeRows decodes the rows of the outbox table's inserts and only
// those: on a busy server most of the log is other tables'.
func (r *reader) decodeRows(e *replication.RowsEvent, data []byte) error {
	pos, err := e.DecodeHeader(data)
	if err != nil {
		return err
	}
	if !r.ours(e.Table) || e.Type() != replication.EnumRowsEventTypeInsert {
		return nil
	}
	return e.DecodeData(pos, data)
}

// rows adds an insert's fresh events to t.
func (r *reader) rows(e *replication.RowsEvent, t *txnState) error {
	if names := e.Table.ColumnNameString(); len(names) > 0 {
		// binlog_row_metadata=FULL: the log names the row's columns,
		// whatever the table looks like now.
		if !slices.Equal(names, r.logged) {
			l, err := layoutOf(names)
			if err != nil {
				return &SetupError{Problem: err.Error(), Fix: "run relay-cli migrate"}
			}
			r.layout, r.logged = l, names
		}
	} else if int(e.ColumnCount) != r.layout.width {
		// The table changed since the reader read its columns.
		if err := r.readColumns(); err != nil {
			return err
		}
		if r.layout.width != int(e.ColumnCount) {
			return &SetupError{Problem: fmt.Sprintf("the log holds rows of %d columns of the outbox table, which has %d now: it was altered since", e.ColumnCount, r.layout.width),
				Fix: "set binlog_row_metadata=FULL so that the log names its columns, then restart the relay"}
		}
	}
	for _, row := range e.Rows {
		ev, seq, fresh, err := r.layout.event(row)
		if err != nil {
			// One unreadable row must not stop the others: it stays
			// PENDING in the table.
			r.log.Error("an inserted outbox row cannot be read from the binlog; it is left in the table", "error", err)
			continue
		}
		if fresh {
			t.events = append(t.events, ev)
			t.seqs = append(t.seqs, seq)
		}
	}
	return nil
}

// acks keeps the transactions read and not yet settled, in log order,
// and the position up to which all are (the settled position).
type acks struct {
	mu      sync.Mutex
	queue   []*ackEntry
	settled position
	moved   bool
	gtid    string
}

type ackEntry struct {
	pos  position
	done bool
}

// add appends a transaction that ended at pos, settled already when done.
func (a *acks) add(pos position, done bool) *ackEntry {
	a.mu.Lock()
	defer a.mu.Unlock()
	if pos.GTID != "" {
		a.gtid = pos.GTID
	}
	if n := len(a.queue); done && n > 0 && a.queue[n-1].done {
		// Settled transactions in a row need only the last position.
		a.queue[n-1].pos = pos
		return a.queue[n-1]
	}
	e := &ackEntry{pos: pos, done: done}
	a.queue = append(a.queue, e)
	a.advance()
	return e
}

// ack settles e.
func (a *acks) ack(e *ackEntry) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e.done = true
	a.advance()
}

func (a *acks) advance() {
	for len(a.queue) > 0 && a.queue[0].done {
		a.settled, a.moved = a.queue[0].pos, true
		a.queue[0] = nil
		a.queue = a.queue[1:]
	}
}

// lastGTID is the GTID position of the latest transaction read.
func (a *acks) lastGTID() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.gtid
}

// peek returns the settled position and whether it moved since the last
// take.
func (a *acks) peek() (position, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.settled, a.moved
}

// take is peek, marking the position saved.
func (a *acks) take() (position, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	moved := a.moved
	a.moved = false
	return a.settled, moved
}

// untake marks pos unsaved again (its save failed), unless it moved on.
func (a *acks) untake(pos position) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.settled == pos {
		a.moved = true
	}
}
