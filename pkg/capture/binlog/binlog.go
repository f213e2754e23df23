// Package binlog reads an outbox table's inserts from the binary log of
// MySQL or MariaDB (CAPTURE=binlog): the server sends its log as to a
// replica, in commit order, and the reader hands the relay each committed
// transaction's outbox events (capture.Source, as pkg/capture/pgwal does
// for PostgreSQL).
//
// One reader streams a table at a time: it holds the named lock
// outbox_relay.binlog.<table> (GET_LOCK) on a connection of its own while
// it streams, and Open answers capture.ErrBusy to the others, which wait as
// standbys. Where the stream is acknowledged to — every transaction before
// it settled — is kept in the table outbox_relay_positions beside the
// outbox: a GTID position (MariaDB's domain-server-sequence list or MySQL's
// GTID set) and the binlog file and offset as the fallback. The reader
// writes it at most every Config.SaveInterval and when the stream closes;
// unrelated transactions move it too, so an idle outbox on a busy server
// does not replay hours of log after a restart.
package binlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"time"

	gosql "github.com/go-sql-driver/mysql"

	"github.com/outbox-relay/relay/internal/fieldcheck"
	"github.com/outbox-relay/relay/pkg/capture"
)

// Defaults of Config's durations.
const (
	SaveIntervalDefault = 200 * time.Millisecond
	HeartbeatDefault    = 5 * time.Second
)

// PositionTable is the table, in the outbox's database, where readers keep
// their positions: one row per outbox table.
const PositionTable = "outbox_relay_positions"

// SetupError is capture's: a setting an operator must change.
type SetupError = capture.SetupError

// ConfigError is a Config field that cannot work; Validate returns one
// (joined, for several).
type ConfigError = fieldcheck.FieldError

// Config says what to read and how. Conn, Database and Table are
// required; zero durations take their defaults.
type Config struct {
	// Conn is the storage's connection settings (address, user,
	// password, TLS); the reader connects with them as a replica does.
	Conn *gosql.Config
	// Database and Table name the outbox table.
	Database, Table string
	// ServerID is the replica id the reader registers with: it must
	// differ from the server's and from every other replica's and
	// reader's (a second connection with the same id makes the server
	// drop the first). 0 takes ServerIDFor(RelayID).
	ServerID uint32
	// RelayID names the relay, for ServerID's default.
	RelayID string
	// SaveInterval is how often, at most, the settled position is
	// written: a crash re-sends what was settled since the last write.
	SaveInterval time.Duration
	// Heartbeat is how often the server sends a heartbeat while its log
	// is quiet; a stream silent for three of them has failed.
	Heartbeat time.Duration
	// Logger gets the reader's own lines; nil discards them.
	Logger *slog.Logger
}

// Validate reports every field that cannot work, by its Go name.
func (c Config) Validate() error {
	v := fieldcheck.Check("binlog")
	v.Expect("Config.Conn", c.Conn != nil, "must be set")
	v.Expect("Config.Database", c.Database != "", "must be set")
	v.Expect("Config.Table", c.Table != "", "must be set")
	v.Expect("Config.SaveInterval", c.SaveInterval >= 0, "must be positive, got %s", c.SaveInterval)
	v.Expect("Config.Heartbeat", c.Heartbeat >= 0, "must be positive, got %s", c.Heartbeat)
	return v.Err()
}

func (c Config) withDefaults() Config {
	fieldcheck.Default(&c.SaveInterval, SaveIntervalDefault)
	fieldcheck.Default(&c.Heartbeat, HeartbeatDefault)
	if c.ServerID == 0 {
		c.ServerID = ServerIDFor(c.RelayID)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// ServerIDFor is the replica id of a relay named relayID: a hash of the
// name in [2^31, 2^32), above the small ids operators give servers and
// replicas by hand, so that relays with distinct RELAY_IDs register
// distinct ids.
func ServerIDFor(relayID string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(relayID))
	return 1<<31 | h.Sum32()&(1<<31-1)
}

// lockName is the named lock of the table's reader.
func (c Config) lockName() string { return LockName(c.Database, c.Table) }

// key is the table's row in PositionTable.
func (c Config) key() string { return c.Database + "." + c.Table }

// open returns a pool of at most n connections with the storage's
// settings.
func (c Config) open(n int) (*sql.DB, error) {
	conn := c.Conn.Clone()
	conn.DBName = c.Database
	connector, err := gosql.NewConnector(conn)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(n)
	return db, nil
}

// Source opens streams of one table's inserts (capture.Source).
type Source struct {
	Config Config
}

var _ capture.Source = Source{}

// Errors Open returns, wrapping capture's: the relay decides what each
// means.
var (
	ErrBusy = capture.ErrBusy
	ErrLost = capture.ErrLost
)

// Open takes the table's reader lock, checks the server, and starts a
// stream where the saved position ends, or from the server's position now
// when none is saved (Start.Created: rows written before it are the
// claims' to deliver).
func (s Source) Open(ctx context.Context) (capture.Stream, capture.Start, error) {
	if err := s.Config.Validate(); err != nil {
		return nil, capture.Start{}, err
	}
	cfg := s.Config.withDefaults()
	r, start, err := open(ctx, cfg)
	if err != nil {
		return nil, capture.Start{}, err
	}
	return r, start, nil
}

// Reset forgets the table's saved position, so that the next Open starts
// from the server's position then.
func (s Source) Reset(ctx context.Context) error {
	if err := s.Config.Validate(); err != nil {
		return err
	}
	db, err := s.Config.open(1)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, "DELETE FROM "+quote(PositionTable)+" WHERE outbox_table = ?", s.Config.key())
	var my *gosql.MySQLError
	if errors.As(err, &my) && my.Number == errNoSuchTable {
		return nil
	}
	if err != nil {
		return fmt.Errorf("forget the binlog position: %w", err)
	}
	return nil
}
