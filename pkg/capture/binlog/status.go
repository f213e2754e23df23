package binlog

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	gosql "github.com/go-sql-driver/mysql"
)

// LockName is the named lock (GET_LOCK) the reader of database.table holds
// while it streams; MySQL allows 64 characters, so a long name is hashed.
func LockName(database, table string) string {
	name := "outbox_relay.binlog." + database + "." + table
	if len(name) <= 64 {
		return name
	}
	sum := sha256.Sum256([]byte(database + "." + table))
	return "outbox_relay.binlog." + hex.EncodeToString(sum[:])[:40]
}

// Position is a place in a server's binary log: a GTID position or set
// (empty when none is known) and the binlog file and the offset in it.
type Position struct {
	GTID string
	File string
	Pos  uint32
}

func (p Position) String() string {
	if p.GTID != "" {
		return fmt.Sprintf("gtid %s (%s:%d)", p.GTID, p.File, p.Pos)
	}
	return fmt.Sprintf("%s:%d", p.File, p.Pos)
}

// Status is what an operator asks of a table's binlog reader: where it is
// saved to, where the server's log ends, how far behind that is, and
// whether a reader streams now.
type Status struct {
	// Lock is the reader's named lock; Streaming is true while a
	// connection holds it (IS_USED_LOCK).
	Lock      string
	Streaming bool
	// Saved is false when PositionTable has no row for the table (or
	// does not exist): no reader has saved a position yet. The fields
	// below are then zero.
	Saved bool
	// Position is the saved position, Server the server it is of,
	// SavedAt when it was written (UTC) and Age how long ago, by the
	// server's clock.
	Position Position
	Server   string
	SavedAt  time.Time
	Age      time.Duration
	// Current is the end of the server's log now (SHOW MASTER STATUS,
	// and @@gtid_binlog_pos on MariaDB or @@gtid_executed on MySQL).
	Current Position
	// BehindBytes is Current.Pos-Position.Pos when both are in the same
	// file, else 0; BehindFiles is how many files the saved position is
	// behind (0 in the same file, -1 when the files' names do not tell).
	BehindBytes int64
	BehindFiles int
}

// ReadStatus reads the status of the reader of database.table over db, a
// pool on the outbox's server. It needs what the relay's user has: the
// position table's rights and REPLICATION CLIENT (BINLOG MONITOR). The
// server's position is read only when one is saved; when that read fails,
// the Status returned with the error holds the saved position.
func ReadStatus(ctx context.Context, db *sql.DB, database, table string) (Status, error) {
	st := Status{Lock: LockName(database, table)}
	var holder sql.NullInt64
	if err := db.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", st.Lock).Scan(&holder); err != nil {
		return st, fmt.Errorf("read the binlog reader's lock: %w", err)
	}
	st.Streaming = holder.Valid
	var pos uint64
	var age sql.NullInt64
	err := db.QueryRowContext(ctx, "SELECT gtid, binlog_file, binlog_pos, server, CAST(saved_at AS CHAR), TIMESTAMPDIFF(MICROSECOND, saved_at, UTC_TIMESTAMP(6)) FROM "+
		quote(database)+"."+quote(PositionTable)+" WHERE outbox_table = ?", database+"."+table).
		Scan(&st.Position.GTID, &st.Position.File, &pos, &st.Server, savedAt{&st.SavedAt}, &age)
	var my *gosql.MySQLError
	switch {
	case errors.Is(err, sql.ErrNoRows), errors.As(err, &my) && my.Number == errNoSuchTable:
	case err != nil:
		return st, fmt.Errorf("read the saved binlog position: %w", err)
	default:
		st.Saved = true
		st.Position.Pos = uint32(pos)
		st.Age = time.Duration(max(age.Int64, 0)) * time.Microsecond
	}
	if !st.Saved {
		return st, nil
	}
	s, err := serverFlavor(ctx, db)
	if err != nil {
		return st, err
	}
	cur, err := currentPosition(ctx, db, s)
	if err != nil {
		return st, err
	}
	st.Current = Position(cur)
	st.BehindFiles = filesBetween(st.Position.File, st.Current.File)
	if st.BehindFiles == 0 && st.Current.Pos > st.Position.Pos {
		st.BehindBytes = int64(st.Current.Pos - st.Position.Pos)
	}
	return st, nil
}

// savedAt scans saved_at as the text the server writes, so that the pool
// needs no parseTime.
type savedAt struct{ to *time.Time }

func (s savedAt) Scan(v any) error {
	var text string
	switch v := v.(type) {
	case []byte:
		text = string(v)
	case string:
		text = v
	case time.Time:
		*s.to = v.UTC()
		return nil
	default:
		return fmt.Errorf("saved_at: unexpected %T", v)
	}
	t, err := time.ParseInLocation("2006-01-02 15:04:05.999999", text, time.UTC)
	if err != nil {
		return fmt.Errorf("saved_at: %w", err)
	}
	*s.to = t
	return nil
}

// serverFlavor learns what currentPosition needs, without checkServer's
// checks: a status is worth reading on a server whose settings are wrong.
func serverFlavor(ctx context.Context, q querier) (server, error) {
	var version string
	if err := q.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		return server{}, fmt.Errorf("read the server's version: %w", err)
	}
	if strings.Contains(strings.ToLower(version), "mariadb") {
		return server{flavor: gomysql.MariaDBFlavor, gtid: true}, nil
	}
	var mode string
	if err := q.QueryRowContext(ctx, "SELECT @@global.gtid_mode").Scan(&mode); err != nil {
		return server{}, fmt.Errorf("read the server's GTID settings: %w", err)
	}
	return server{flavor: gomysql.MySQLFlavor, gtid: strings.EqualFold(mode, "ON")}, nil
}

// filesBetween is how many binlog files lie from from to to, by their
// numbered extensions (binlog.000012); -1 when the names do not say.
func filesBetween(from, to string) int {
	if from == to {
		return 0
	}
	i, j := strings.LastIndexByte(from, '.'), strings.LastIndexByte(to, '.')
	if i < 0 || j < 0 || from[:i] != to[:j] {
		return -1
	}
	f, err1 := strconv.Atoi(from[i+1:])
	t, err2 := strconv.Atoi(to[j+1:])
	if err1 != nil || err2 != nil {
		return -1
	}
	return t - f
}
