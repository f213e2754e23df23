// Package pgwal reads an outbox table's inserts from PostgreSQL's
// write-ahead log through logical replication (the pgoutput plugin): every
// committed insert, in commit order, without claiming a row or scanning the
// table. It tells the server it may discard WAL only up to the end of the
// oldest transaction its caller has not acknowledged (Txn.Ack),
// so a crash or a takeover replays whole transactions from there and loses
// none.
//
// One Reader streams from a slot at a time; the server refuses a second
// (ErrSlotInUse), which is how standbys wait for their turn.
package pgwal

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/outbox-relay/relay/internal/fieldcheck"
	"github.com/outbox-relay/relay/pkg/capture"
	"github.com/outbox-relay/relay/pkg/outbox"
)

// Defaults of Config's durations.
const (
	StatusIntervalDefault = time.Second
	HeartbeatDefault      = 10 * time.Second
)

// HeartbeatOff as Config.Heartbeat writes no heartbeats.
const HeartbeatOff time.Duration = -1

// HeartbeatPrefix is the prefix of the logical messages the reader writes as
// heartbeats; MovePrefix marks a transaction whose inserts only move rows
// between partitions (the relay's retention), which the reader skips.
const (
	HeartbeatPrefix = "outbox-relay:heartbeat"
	MovePrefix      = "outbox-relay:move"
)

// Errors Open returns, wrapping capture's: the relay decides what each
// means for it.
var (
	// ErrSlotInUse: another reader streams from the slot (a standby's
	// normal state).
	ErrSlotInUse = fmt.Errorf("replication slot is active for another reader: %w", capture.ErrBusy)
	// ErrSlotLost: the server invalidated the slot (max_slot_wal_keep_size)
	// and the WAL it needed is gone; events written meanwhile are only in
	// the table.
	ErrSlotLost = fmt.Errorf("replication slot was invalidated, the WAL it needed is gone: %w", capture.ErrLost)
	// ErrPublicationChanged: the publication was dropped, made again,
	// altered, or the table left it (perhaps to come back) while the slot
	// existed. The slot decodes with the catalogue as of its own position,
	// so it either fails for good ("publication does not exist") or
	// silently skipped the inserts of the gap: the position is as good as
	// lost, and the events are still in the table.
	ErrPublicationChanged = fmt.Errorf("the publication changed under the replication slot: %w", capture.ErrLost)
)

// PublicationCheckDefault is how often a streaming reader reads the
// publication's identity: one catalogue query per interval on a
// connection of its own.
const PublicationCheckDefault = 2 * time.Second

// SetupError is capture's: a setting an operator must change.
type SetupError = capture.SetupError

// Config says what to read and how. Zero fields take their defaults;
// Validate names the fields that cannot work. ConnString and Table, which
// have none, say where to read: the relay sets them from its storage.
type Config struct {
	// ConnString is the database's URL as pgx takes it; the reader adds
	// replication=database for its streaming connection.
	ConnString string
	// Schema (empty: any) and Table name the outbox table.
	Schema, Table string
	// Slot and Publication are the logical replication slot and the
	// publication of the table's inserts. Empty means NameDefault of the
	// table.
	Slot, Publication string
	// StatusInterval is how often the reader tells the server how far it
	// may discard WAL. 0 means StatusIntervalDefault.
	StatusInterval time.Duration
	// Heartbeat is how often the reader writes a logical message, so that
	// the slot moves while the outbox is idle and the rest of the database
	// is not. 0 means HeartbeatDefault; HeartbeatOff (any negative value)
	// turns heartbeats off.
	Heartbeat time.Duration
	// PublicationCheck is how often a streaming reader checks that the
	// publication is the one it opened with. 0 means
	// PublicationCheckDefault.
	PublicationCheck time.Duration
	Logger           *slog.Logger
}

// ConfigError is a Config field that cannot work; Validate returns one
// for each such field (joined), which errors.As finds.
type ConfigError = fieldcheck.FieldError

// Validate reports every field that cannot work, by its Go name, as
// *ConfigError: a slot or publication name that could not be pasted into
// a replication command safely, a negative StatusInterval.
func (c Config) Validate() error {
	v := fieldcheck.Check("pgwal")
	v.Expect("Slot", c.Slot == "" || Identifier(c.Slot), "%q: use lowercase letters, digits and underscores (at most 63)", c.Slot)
	v.Expect("Publication", c.Publication == "" || Identifier(c.Publication), "%q: use lowercase letters, digits and underscores (at most 63)", c.Publication)
	v.Expect("StatusInterval", c.StatusInterval >= 0, "must be positive, got %s", c.StatusInterval)
	v.Expect("PublicationCheck", c.PublicationCheck >= 0, "must be positive, got %s", c.PublicationCheck)
	return v.Err()
}

func (c Config) withDefaults() Config {
	fieldcheck.Default(&c.Slot, NameDefault(c.Schema, c.Table))
	fieldcheck.Default(&c.Publication, NameDefault(c.Schema, c.Table))
	fieldcheck.Default(&c.StatusInterval, StatusIntervalDefault)
	fieldcheck.Default(&c.Heartbeat, HeartbeatDefault)
	fieldcheck.Default(&c.PublicationCheck, PublicationCheckDefault)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// prepared is c with its defaults, or a *SetupError when it cannot work:
// retrying would not change it.
func (c Config) prepared() (Config, error) {
	if err := c.Validate(); err != nil {
		return c, &SetupError{Problem: err.Error(), Fix: "correct the reader's Config"}
	}
	return c.withDefaults(), nil
}

// NameDefault is the slot's and the publication's name for a table:
// outbox_relay_<schema>_<table>, or outbox_relay_<table> for a table named
// without its schema, so that relays of two tables in one database do not
// read each other's. Past PostgreSQL's 63 characters it is cut and ends
// with a hash of the whole, so that two long names stay apart.
func NameDefault(schema, table string) string {
	name := "outbox_relay_" + table
	if schema != "" {
		name = "outbox_relay_" + schema + "_" + table
	}
	if len(name) <= 63 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return name[:54] + "_" + hex.EncodeToString(sum[:4])
}

// slotInfo describes the slot the reader streams from, as Open found it.
type slotInfo struct {
	// Created is true when Open created the slot: rows written before it
	// are not in its stream.
	Created bool
	// SystemID and Timeline identify the server (IDENTIFY_SYSTEM): a
	// promoted standby has the same system id on a new timeline.
	SystemID string
	Timeline int32
	// Start is where streaming starts: the slot's confirmed position.
	Start pglogrepl.LSN
}

// txn is a transaction being received or waiting to be acknowledged.
type txn struct {
	xid uint32
	// committed is when the transaction committed, as the server says.
	committed time.Time
	events    []outbox.Event
	seqs      []int64
	// end is the end of the transaction in the WAL: once it is acknowledged,
	// the server may forget everything up to it.
	end   pglogrepl.LSN
	acked bool
}

// Reader streams an outbox table's committed inserts.
type Reader struct {
	cfg  Config
	log  *slog.Logger
	conn *pgconn.PgConn
	slot slotInfo

	acks acks
	out  chan capture.Txn
	stop context.CancelFunc
	done chan struct{}
	err  error // why the stream ended; read after done closes
	// warnedAt is when warnClaimedNotStreamed last spoke.
	warnedAt time.Time
	// publication is the publication's identity when the stream opened
	// (publicationIdentitySQL); pubWatch reports a change of it.
	publication string
	pubWatch    *pubWatch
}

// Open connects, checks that the database can do what the reader needs,
// creates the slot when it does not exist, and starts streaming from the
// slot's confirmed position. Errors: *SetupError for a setting an operator
// must change, ErrSlotInUse, ErrSlotLost, or what the connection said.
func Open(ctx context.Context, cfg Config) (*Reader, error) {
	cfg, err := cfg.prepared()
	if err != nil {
		return nil, err
	}
	conn, err := connect(ctx, cfg.ConnString, true)
	if err != nil {
		return nil, err
	}
	r := &Reader{cfg: cfg, log: cfg.Logger.With("slot", cfg.Slot), conn: conn, out: make(chan capture.Txn, 64)}
	if err := r.prepare(ctx); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	streamCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	r.stop, r.done = stop, make(chan struct{})
	go r.stream(streamCtx)
	return r, nil
}

// connect opens a connection to connString, a replication one when asked.
func connect(ctx context.Context, connString string, replication bool) (*pgconn.PgConn, error) {
	cfg, err := pgconn.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("parse storage URL: %w", err)
	}
	for k := range cfg.RuntimeParams {
		// pgxpool's and pgx's settings, not the server's: the server
		// refuses a startup parameter it does not know.
		if strings.HasPrefix(k, "pool_") || clientParams[k] {
			delete(cfg.RuntimeParams, k)
		}
	}
	if cfg.ConnectTimeout == 0 {
		// A server that accepts and never answers would hold the reader
		// (and a relay's start) for good.
		cfg.ConnectTimeout = ConnectTimeoutDefault
	}
	if replication {
		cfg.RuntimeParams["replication"] = "database"
	}
	// The binary tuple format is independent of these; the reader's own
	// queries are not.
	cfg.RuntimeParams["DateStyle"] = "ISO"
	cfg.RuntimeParams["TimeZone"] = "UTC"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42501" && replication {
			return nil, &SetupError{
				Problem: "the role may not stream the write-ahead log (" + pgErr.Message + ")",
				Fix:     "ALTER ROLE <relay role> REPLICATION (relay-cli grants --capture wal prints it), or use CAPTURE=poll",
			}
		}
		if errors.As(err, &pgErr) && pgErr.Code == "28000" && replication {
			return nil, &SetupError{
				Problem: "the server refused a replication connection (" + pgErr.Message + ")",
				Fix:     "allow it in pg_hba.conf (a line for the database with the replication keyword does not cover logical replication: use the database name or all) and give the role REPLICATION",
			}
		}
		return nil, fmt.Errorf("connect for logical replication: %w", err)
	}
	return conn, nil
}

// clientParams are URL parameters pgx reads itself, and the relay's own
// table, which pgconn would pass on to the server.
var clientParams = map[string]bool{
	"default_query_exec_mode": true, "statement_cache_capacity": true, "description_cache_capacity": true,
	"table": true,
}

// ConnectTimeoutDefault bounds connecting when the URL sets no
// connect_timeout.
const ConnectTimeoutDefault = 10 * time.Second

// CheckServer connects as Open would and checks the server alone — the
// role may replicate, wal_level is logical, PostgreSQL 15 or later — so
// that nothing is created in a database that cannot serve the reader.
func CheckServer(ctx context.Context, cfg Config) error {
	conn, err := connect(ctx, cfg.ConnString, true)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	return (&Reader{cfg: cfg, conn: conn}).checkServer(ctx)
}

// Check connects as Open would and checks what Open checks — the role may
// replicate, wal_level is logical, the publication exists, the slot name is
// not another database's — without touching the slot: a relay calls it at
// start, so that a database that cannot serve it is a configuration error.
func Check(ctx context.Context, cfg Config) error {
	cfg, err := cfg.prepared()
	if err != nil {
		return err
	}
	conn, err := connect(ctx, cfg.ConnString, true)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	r := &Reader{cfg: cfg, conn: conn}
	if err := r.check(ctx); err != nil {
		return err
	}
	return r.slotElsewhere(ctx)
}

// slotElsewhere is a SetupError when the slot's name is taken by another
// database's slot: slot names are server-wide.
func (r *Reader) slotElsewhere(ctx context.Context) error {
	other, err := r.query(ctx, "SELECT database FROM pg_replication_slots WHERE slot_name = "+literal(r.cfg.Slot)+
		" AND database IS DISTINCT FROM current_database()")
	if err != nil {
		return r.setupError(err, "look for the replication slot")
	}
	if len(other) > 0 {
		return &SetupError{
			Problem: fmt.Sprintf("replication slot %s belongs to database %s", r.cfg.Slot, other[0][0]),
			Fix:     "slot names are server-wide: set WAL_SLOT_NAME to a name of this database's own",
		}
	}
	return nil
}

// check identifies the server and checks it and the publication.
func (r *Reader) check(ctx context.Context) error {
	if err := r.checkServer(ctx); err != nil {
		return err
	}
	return r.checkPublication(ctx)
}

// checkServer identifies the server and checks wal_level and its version.
func (r *Reader) checkServer(ctx context.Context) error {
	sys, err := pglogrepl.IdentifySystem(ctx, r.conn)
	if err != nil {
		return r.setupError(err, "identify the server")
	}
	r.slot.SystemID, r.slot.Timeline = sys.SystemID, sys.Timeline
	level, err := r.query(ctx, "SHOW wal_level")
	if err != nil {
		return r.setupError(err, "read wal_level")
	}
	if len(level) == 0 || level[0][0] != "logical" {
		got := ""
		if len(level) > 0 {
			got = level[0][0]
		}
		return &SetupError{
			Problem: fmt.Sprintf("the database runs with wal_level=%s; CAPTURE=wal needs wal_level=logical", got),
			Fix:     "set wal_level = logical (ALTER SYSTEM SET wal_level = logical, or the managed service's parameter) and restart PostgreSQL, or use CAPTURE=poll",
		}
	}
	version, err := r.query(ctx, "SHOW server_version_num")
	if err != nil {
		return r.setupError(err, "read the server's version")
	}
	if n := versionNum(version); n < 150000 {
		return &SetupError{
			Problem: fmt.Sprintf("CAPTURE=wal needs PostgreSQL 15 or later (server_version_num %d)", n),
			Fix:     "upgrade PostgreSQL, or use CAPTURE=poll",
		}
	}
	return nil
}

// checkPublication checks that the publication publishes the table's
// inserts through the table itself.
func (r *Reader) checkPublication(ctx context.Context) error {
	pub, err := r.query(ctx, "SELECT p.pubinsert, p.pubviaroot, p.puballtables OR EXISTS ("+
		"SELECT 1 FROM pg_publication_rel pr WHERE pr.prpubid = p.oid AND pr.prrelid = to_regclass("+literal(r.tableName())+"))"+
		" FROM pg_publication p WHERE p.pubname = "+literal(r.cfg.Publication))
	if err != nil {
		return r.setupError(err, "look for the publication")
	}
	fix := "run relay-cli migrate --capture wal (or start the relay with STORAGE_AUTO_MIGRATE=true)"
	switch {
	case len(pub) == 0:
		return &SetupError{Problem: fmt.Sprintf("publication %s does not exist", r.cfg.Publication), Fix: fix}
	case pub[0][2] != "t":
		return &SetupError{
			Problem: fmt.Sprintf("publication %s does not publish table %s (another table's, by its name?)", r.cfg.Publication, r.tableName()),
			Fix:     "set WAL_PUBLICATION_NAME and WAL_SLOT_NAME to names of this table's own, then " + fix,
		}
	case pub[0][0] != "t" || pub[0][1] != "t":
		return &SetupError{
			Problem: fmt.Sprintf("publication %s does not publish inserts through the table itself (publish must include insert, publish_via_partition_root must be true)", r.cfg.Publication),
			Fix:     fmt.Sprintf("ALTER PUBLICATION %s SET (publish = 'insert', publish_via_partition_root = true), or drop it and %s", r.cfg.Publication, fix),
		}
	}
	id, err := r.query(ctx, r.publicationIdentitySQL())
	if err != nil {
		return r.setupError(err, "read the publication's identity")
	}
	// Dropped between the two reads: an empty identity would be the one
	// the stream opened with, and the watch would never see it change.
	if r.publication = identity(id); r.publication == "" {
		return &SetupError{Problem: fmt.Sprintf("publication %s does not exist", r.cfg.Publication), Fix: fix}
	}
	return nil
}

// publicationIdentitySQL reads what changes whenever the publication does
// in a way the slot cannot follow: its row's oid (dropped and made again),
// its row's xmin (any ALTER PUBLICATION … SET, RENAME or OWNER rewrites
// the row), and the oid of the table's membership row (a table dropped
// from the publication and added back gets a new one). Comparing
// identities catches a change however quickly it was undone: no timing
// is involved, only how soon the next check runs.
func (r *Reader) publicationIdentitySQL() string {
	return "SELECT p.oid::text || '/' || p.xmin::text || '/' || coalesce((SELECT pr.oid::text FROM pg_publication_rel pr " +
		"WHERE pr.prpubid = p.oid AND pr.prrelid = to_regclass(" + literal(r.tableName()) + ")), " +
		"CASE WHEN p.puballtables THEN 'all' ELSE 'none' END) FROM pg_publication p WHERE p.pubname = " + literal(r.cfg.Publication)
}

// identity is publicationIdentitySQL's answer; "" when the publication
// does not exist.
func identity(rows [][]string) string {
	if len(rows) == 0 {
		return ""
	}
	return rows[0][0]
}

// versionNum reads SHOW server_version_num's answer; 0 when there is none.
func versionNum(rows [][]string) int {
	if len(rows) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(rows[0][0])
	return n
}

// tableName is the outbox table as SQL names it (its parts are checked
// identifiers).
func (r *Reader) tableName() string {
	if r.cfg.Schema == "" {
		return `"` + r.cfg.Table + `"`
	}
	return `"` + r.cfg.Schema + `"."` + r.cfg.Table + `"`
}

// prepare checks the server and the publication, finds or creates the slot
// and starts replication.
func (r *Reader) prepare(ctx context.Context) error {
	if err := r.check(ctx); err != nil {
		return err
	}
	slot, err := r.query(ctx, "SELECT plugin, coalesce(wal_status, ''), active, coalesce(confirmed_flush_lsn::text, '0/0') "+
		"FROM pg_replication_slots WHERE slot_name = "+literal(r.cfg.Slot)+" AND database = current_database()")
	if err != nil {
		return r.setupError(err, "look for the replication slot")
	}
	switch {
	case len(slot) == 0:
		if err := r.createSlot(ctx); err != nil {
			return err
		}
	case slot[0][0] != "pgoutput":
		return &SetupError{
			Problem: fmt.Sprintf("replication slot %s uses the %s plugin, not pgoutput", r.cfg.Slot, slot[0][0]),
			Fix:     "drop it or name another slot with WAL_SLOT_NAME",
		}
	case slot[0][1] == "lost":
		return ErrSlotLost
	case slot[0][2] == "t":
		return ErrSlotInUse
	default:
		r.slot.Start, _ = pglogrepl.ParseLSN(slot[0][3])
	}
	err = pglogrepl.StartReplication(ctx, r.conn, r.cfg.Slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{
			"proto_version '1'",
			"publication_names " + literal(r.cfg.Publication),
			"binary 'true'",
			"messages 'true'",
		},
	})
	if err != nil {
		return r.setupError(err, "start replication")
	}
	r.acks.confirmed = r.slot.Start
	r.acks.received = r.slot.Start
	return nil
}

// createSlot creates the slot; the server waits for every transaction
// running at that moment to end before it returns.
func (r *Reader) createSlot(ctx context.Context) error {
	r.log.Info("creating the replication slot; waiting for transactions already running to end")
	res, err := pglogrepl.CreateReplicationSlot(ctx, r.conn, r.cfg.Slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "NOEXPORT_SNAPSHOT"})
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42710" {
			// The name is taken: by another database's slot, or by
			// another relay that made it a moment ago.
			var setup *SetupError
			if err := r.slotElsewhere(ctx); errors.As(err, &setup) {
				return err
			}
			return ErrSlotInUse
		}
		return r.setupError(err, "create the replication slot")
	}
	r.slot.Created = true
	r.slot.Start, _ = pglogrepl.ParseLSN(res.ConsistentPoint)
	r.log.Info("created the replication slot", "consistent_point", res.ConsistentPoint)
	return nil
}

// setupError turns what the server said into a SetupError where an operator
// must act, or ErrSlotInUse / ErrSlotLost.
func (r *Reader) setupError(err error, doing string) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == "55006":
			return ErrSlotInUse
		case pgErr.Code == "42704" && strings.Contains(pgErr.Message, "publication"):
			// The slot reached a position past the publication's drop:
			// it fails so at every start, whatever was made since.
			return fmt.Errorf("%s: %w", pgErr.Message, ErrPublicationChanged)
		case pgErr.Code == "55000" && strings.Contains(pgErr.Message, "wal_level"):
			return &SetupError{Problem: pgErr.Message, Fix: "set wal_level = logical and restart PostgreSQL, or use CAPTURE=poll"}
		case pgErr.Code == "55000" && (strings.Contains(pgErr.Message, "invalidated") || strings.Contains(pgErr.Message, "no longer")):
			return ErrSlotLost
		case pgErr.Code == "42501":
			return &SetupError{Problem: "the role may not use logical replication (" + pgErr.Message + ")",
				Fix: "ALTER ROLE <relay role> REPLICATION (relay-cli grants prints it), or use CAPTURE=poll"}
		case pgErr.Code == "53400":
			return &SetupError{Problem: pgErr.Message, Fix: "raise max_replication_slots / max_wal_senders and restart PostgreSQL"}
		}
	}
	return fmt.Errorf("%s: %w", doing, err)
}

// query runs a simple-protocol query on the replication connection (the
// only protocol it speaks) and returns its rows as text.
func (r *Reader) query(ctx context.Context, sql string) ([][]string, error) {
	results, err := r.conn.Exec(ctx, sql).ReadAll()
	if err != nil {
		return nil, err
	}
	var rows [][]string
	for _, res := range results {
		for _, row := range res.Rows {
			vals := make([]string, len(row))
			for i, v := range row {
				vals[i] = string(v)
			}
			rows = append(rows, vals)
		}
	}
	return rows, nil
}

// Txns delivers the committed transactions with outbox events; it is
// closed when the stream ends (Err says why). The caller calls Ack on
// each once its events are settled.
func (r *Reader) Txns() <-chan capture.Txn { return r.out }

// Err is why the stream ended: the connection failed, the slot was dropped
// or invalidated. Read it after Txns is closed.
func (r *Reader) Err() error { return r.err }

// Close stops streaming, tells the server how far it may discard WAL, and
// closes the connection.
func (r *Reader) Close(ctx context.Context) error {
	r.stop()
	<-r.done
	return r.conn.Close(ctx)
}

// stream reads the replication stream until ctx ends or it fails, sending
// the reader's position every StatusInterval and writing heartbeats.
func (r *Reader) stream(ctx context.Context) {
	defer close(r.done)
	defer close(r.out)
	var hb *sideLoop
	if r.cfg.Heartbeat > 0 {
		hb = startHeartbeat(ctx, r.cfg.ConnString, r.cfg.Heartbeat, r.log)
		defer hb.stop()
	}
	r.pubWatch = startPubWatch(ctx, r.cfg.ConnString, r.cfg.PublicationCheck, r.cfg.Publication, r.publicationIdentitySQL(), r.publication, r.log)
	defer r.pubWatch.stop()
	d := decoder{schema: r.cfg.Schema, table: r.cfg.Table, relations: map[uint32]*relation{}, strs: map[string]string{}}
	// Reads wait on the connection's deadline, not on a context: pgconn
	// watches a context with a goroutine per call, a cost per message.
	// The end of ctx cuts the read short by moving the deadline.
	nc := r.conn.Conn()
	stopWatch := context.AfterFunc(ctx, func() { _ = nc.SetReadDeadline(time.Now()) })
	defer stopWatch()
	nextStatus := time.Now()
	var deadline time.Time
	for {
		if time.Now().After(nextStatus) {
			if err := r.sendStatus(ctx); err != nil {
				r.fail(ctx, err)
				return
			}
			nextStatus = time.Now().Add(r.cfg.StatusInterval)
		}
		if !nextStatus.Equal(deadline) {
			deadline = nextStatus
			_ = nc.SetReadDeadline(deadline)
		}
		if ctx.Err() != nil {
			r.finish()
			return
		}
		if err := r.pubWatch.changed(); err != nil {
			r.fail(ctx, err)
			return
		}
		msg, err := r.conn.ReceiveMessage(context.Background())
		if err != nil {
			if ctx.Err() != nil {
				r.finish()
				return
			}
			if pgconn.Timeout(err) {
				continue
			}
			r.fail(ctx, fmt.Errorf("receive from the replication stream: %w", err))
			return
		}
		switch msg := msg.(type) {
		case *pgproto3.CopyData:
			if err := r.handle(ctx, &d, msg.Data); err != nil {
				if ctx.Err() != nil {
					r.finish()
					return
				}
				r.fail(ctx, err)
				return
			}
			if d.replyNow {
				d.replyNow = false
				nextStatus = time.Now()
			}
			r.warnClaimedNotStreamed(&d)
		case *pgproto3.ErrorResponse:
			r.fail(ctx, r.setupError(pgconn.ErrorResponseToPgError(msg), "stream"))
			return
		default:
			// NoticeResponse and the like carry nothing for the reader.
		}
	}
}

// claimedWarningEvery is how often the reader says, at most, that
// events it saw were left to the claims (warnClaimedNotStreamed).
const claimedWarningEvery = time.Minute

// warnClaimedNotStreamed says, at most every claimedWarningEvery, how many
// events were due when their transaction committed but were left to the
// claims: their available_at lies after their created_at, which is how the
// claims know a row due again or scheduled, and which a producer that sets
// created_at itself (from its own clock, or before its transaction's now())
// makes true of every event. Those are delivered as under CAPTURE=poll.
func (r *Reader) warnClaimedNotStreamed(d *decoder) {
	if d.claimedNotStreamed == 0 || time.Since(r.warnedAt) < claimedWarningEvery {
		return
	}
	r.log.Warn("events whose available_at is after their created_at are claimed from the table, not delivered from the log; "+
		"leave created_at to its default, or set available_at to the same value",
		"events", d.claimedNotStreamed)
	d.claimedNotStreamed = 0
	r.warnedAt = time.Now()
}

// handle processes one CopyData message of the stream.
func (r *Reader) handle(ctx context.Context, d *decoder, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return fmt.Errorf("parse keepalive: %w", err)
		}
		// Every transaction that committed before ServerWALEnd has been
		// sent before this message; one still open commits after it.
		r.acks.reached(ka.ServerWALEnd)
		if ka.ReplyRequested {
			d.replyNow = true
		}
	case pglogrepl.XLogDataByteID:
		xld, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return fmt.Errorf("parse WAL data: %w", err)
		}
		t, err := d.decode(xld.WALData, &r.acks)
		if err != nil {
			return err
		}
		if t != nil {
			return r.emit(ctx, t)
		}
	}
	return nil
}

// emit hands a transaction to Txns, telling the server the reader's
// position meanwhile so that a caller slow to take it (a broker outage)
// does not look like a dead reader.
func (r *Reader) emit(ctx context.Context, t *txn) error {
	out := capture.Txn{Events: t.events, Seqs: t.seqs, ID: strconv.FormatUint(uint64(t.xid), 10), Ack: func() { r.acks.ack(t) }}
	tick := time.NewTicker(r.cfg.StatusInterval)
	defer tick.Stop()
	for {
		select {
		case r.out <- out:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			if err := r.sendStatus(ctx); err != nil {
				return err
			}
		}
	}
}

// sendStatus tells the server how far it may discard WAL.
func (r *Reader) sendStatus(ctx context.Context) error {
	lsn := r.acks.safe()
	err := pglogrepl.SendStandbyStatusUpdate(ctx, r.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: lsn, WALFlushPosition: lsn, WALApplyPosition: lsn,
	})
	if err != nil {
		return fmt.Errorf("send the stream position: %w", err)
	}
	return nil
}

// finish sends the last position before the connection closes, so that the
// next reader replays as little as it can.
func (r *Reader) finish() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = r.conn.Conn().SetDeadline(time.Now().Add(time.Second))
	_ = r.sendStatus(ctx)
}

func (r *Reader) fail(ctx context.Context, err error) {
	r.err = err
	if ctx.Err() == nil {
		r.finish()
	}
}

// acks decides how far the server may discard WAL: up to the end of the
// last transaction before the oldest one not acknowledged, or, when nothing is
// in flight, as far as the stream has reached.
type acks struct {
	mu sync.Mutex
	// open are the transactions received or being received and not yet
	// acknowledged, in commit order.
	open []*txn
	// receiving is true between a transaction's BEGIN and its COMMIT.
	receiving bool
	// confirmed is the end of the last acknowledged transaction that no
	// unacknowledged one precedes; received is the furthest position the
	// stream has reached.
	confirmed, received pglogrepl.LSN
}

func (a *acks) begin() {
	a.mu.Lock()
	a.receiving = true
	a.mu.Unlock()
}

func (a *acks) commit(t *txn) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.receiving = false
	a.open = append(a.open, t)
	a.received = max(a.received, t.end)
}

// commitEmpty is a transaction without outbox events: nothing to acknowledge.
func (a *acks) commitEmpty(end pglogrepl.LSN) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.receiving = false
	a.received = max(a.received, end)
}

func (a *acks) reached(lsn pglogrepl.LSN) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.receiving {
		a.received = max(a.received, lsn)
	}
}

func (a *acks) ack(t *txn) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t.acked = true
}

// safe is the position the server may discard WAL up to.
func (a *acks) safe() pglogrepl.LSN {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for n < len(a.open) && a.open[n].acked {
		a.confirmed = max(a.confirmed, a.open[n].end)
		n++
	}
	a.open = a.open[n:]
	if len(a.open) == 0 && !a.receiving {
		a.confirmed = max(a.confirmed, a.received)
	}
	return a.confirmed
}

// Identifier reports whether s is safe to paste into a replication
// command: lowercase letters, digits and underscores.
func Identifier(s string) bool {
	if s == "" || len(s) > 63 || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}

// literal quotes s as an SQL string literal; s is an identifier already
// checked, so this is belt and braces.
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// DropSlot drops the slot if it exists and no reader streams from it.
func DropSlot(ctx context.Context, connString, slot string) error {
	if !Identifier(slot) {
		return fmt.Errorf("invalid slot name %q", slot)
	}
	conn, err := connect(ctx, connString, false)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	_, err = conn.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = "+
		literal(slot)+" AND database = current_database()").ReadAll()
	if err != nil {
		return fmt.Errorf("drop replication slot %s: %w", slot, err)
	}
	return nil
}

// Source opens Readers with one Config: capture.Source for PostgreSQL.
type Source struct{ Config Config }

var _ capture.Source = Source{}

// Open starts a Reader (see Open).
func (s Source) Open(ctx context.Context) (capture.Stream, capture.Start, error) {
	r, err := Open(ctx, s.Config)
	if err != nil {
		return nil, capture.Start{}, err
	}
	return r, capture.Start{Created: r.slot.Created, Position: r.slot.Start.String(),
		Server: fmt.Sprintf("system %s timeline %d", r.slot.SystemID, r.slot.Timeline)}, nil
}

// Reset drops the slot, so that the next Open creates it anew.
func (s Source) Reset(ctx context.Context) error {
	return DropSlot(ctx, s.Config.ConnString, s.Config.withDefaults().Slot)
}
