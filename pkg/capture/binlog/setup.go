package binlog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	gosql "github.com/go-sql-driver/mysql"
)

// MySQL error numbers the reader tells apart.
const (
	errNoSuchTable      = 1146
	errAccessDenied     = 1142 // a table privilege
	errSpecificAccess   = 1227 // a global privilege
	errBinlogUnreadable = 1236 // the replica asked for a position the server no longer has
)

// server is what the reader learned about the server it talks to.
type server struct {
	flavor string // gomysql.MySQLFlavor or gomysql.MariaDBFlavor
	id     string // capture.Start.Server: the server and its history
	// gtid is true when the server names transactions by GTID (always
	// on MariaDB; gtid_mode=ON on MySQL).
	gtid bool
	// rowMetadata is true with binlog_row_metadata=FULL: table maps
	// carry column names, so an ALTER TABLE between the saved position
	// and now cannot mislead the decoder.
	rowMetadata bool
}

// CheckServer connects with cfg and checks that the server can serve the
// reader: the binary log on, in ROW format, with full row images. A wrong
// setting is a *SetupError that names it.
func CheckServer(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	db, err := cfg.open(1)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = checkServer(ctx, db)
	return err
}

// checkServer reads and checks the server's log settings.
func checkServer(ctx context.Context, q querier) (server, error) {
	var (
		logBin                 sql.NullInt64
		format, image, version string
		serverID               int64
	)
	err := q.QueryRowContext(ctx, "SELECT @@global.log_bin, @@global.binlog_format, @@global.binlog_row_image, VERSION(), @@global.server_id").
		Scan(&logBin, &format, &image, &version, &serverID)
	if err != nil {
		return server{}, fmt.Errorf("read the server's binlog settings: %w", err)
	}
	s := server{flavor: gomysql.MySQLFlavor}
	if strings.Contains(strings.ToLower(version), "mariadb") {
		s.flavor = gomysql.MariaDBFlavor
	}
	switch {
	case logBin.Int64 != 1:
		return s, &SetupError{Problem: "the server's binary log is off (log_bin=OFF)",
			Fix: "start it with --log-bin --binlog-format=ROW --binlog-row-image=FULL and a server-id (docs/operations.md, \"CAPTURE=binlog\"), or use CAPTURE=poll"}
	case !strings.EqualFold(format, "ROW"):
		return s, &SetupError{Problem: fmt.Sprintf("the server logs binlog_format=%s: the log then holds statements, not the rows they wrote", format),
			Fix: "set binlog_format=ROW (SET PERSIST binlog_format='ROW' on MySQL 8, binlog_format=ROW in the server's config on MariaDB) and restart the producers' sessions, or use CAPTURE=poll"}
	case !strings.EqualFold(image, "FULL"):
		return s, &SetupError{Problem: fmt.Sprintf("the server logs binlog_row_image=%s: an insert's image then may lack columns the relay reads", image),
			Fix: "set binlog_row_image=FULL, or use CAPTURE=poll"}
	}
	if s.flavor == gomysql.MariaDBFlavor {
		s.gtid = true
		s.id = fmt.Sprintf("mariadb server_id=%d", serverID)
	} else {
		var uuid, mode string
		if err := q.QueryRowContext(ctx, "SELECT @@global.server_uuid, @@global.gtid_mode").Scan(&uuid, &mode); err != nil {
			return s, fmt.Errorf("read the server's GTID settings: %w", err)
		}
		s.gtid = strings.EqualFold(mode, "ON")
		s.id = "mysql " + uuid
	}
	var metadata string
	if err := q.QueryRowContext(ctx, "SELECT @@global.binlog_row_metadata").Scan(&metadata); err == nil {
		s.rowMetadata = strings.EqualFold(metadata, "FULL")
	}
	return s, nil
}

// querier is a pool or a connection.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// position is Position, as the reader keeps it: the place after a
// transaction.
type position = Position

// currentPosition is the end of the server's log now.
func currentPosition(ctx context.Context, q querier, s server) (position, error) {
	var p position
	rows, err := q.QueryContext(ctx, "SHOW MASTER STATUS")
	var my *gosql.MySQLError
	if errors.As(err, &my) && my.Number == 1064 {
		rows, err = q.QueryContext(ctx, "SHOW BINARY LOG STATUS") // MySQL 8.4 and later
	}
	if err != nil {
		return p, fmt.Errorf("read the server's binlog position: %w", err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return p, err
	}
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return p, err
		}
		return p, &SetupError{Problem: "the server shows no binlog position (SHOW MASTER STATUS is empty)",
			Fix: "grant the relay's user REPLICATION CLIENT (BINLOG MONITOR on MariaDB 10.5+): relay-cli grants --capture binlog"}
	}
	vals := make([]sql.RawBytes, len(cols))
	dest := make([]any, len(cols))
	for i := range vals {
		dest[i] = &vals[i]
	}
	if err := rows.Scan(dest...); err != nil {
		return p, err
	}
	p.File = string(vals[0])
	var pos uint64
	if _, err := fmt.Sscan(string(vals[1]), &pos); err != nil {
		return p, fmt.Errorf("read the server's binlog position: %q is no offset", vals[1])
	}
	p.Pos = uint32(pos)
	rows.Close()
	switch {
	case s.flavor == gomysql.MariaDBFlavor:
		err = q.QueryRowContext(ctx, "SELECT @@global.gtid_binlog_pos").Scan(&p.GTID)
	case s.gtid:
		err = q.QueryRowContext(ctx, "SELECT @@global.gtid_executed").Scan(&p.GTID)
	}
	if err != nil {
		return p, fmt.Errorf("read the server's GTID position: %w", err)
	}
	p.GTID = strings.ReplaceAll(p.GTID, "\n", "")
	return p, nil
}

// CreatePositionTable creates PositionTable in cfg's database when it is
// missing. It needs CREATE on the database; running it again changes
// nothing.
func CreatePositionTable(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	db, err := cfg.open(1)
	if err != nil {
		return err
	}
	defer db.Close()
	return createPositionTable(ctx, db)
}

func createPositionTable(ctx context.Context, q querier) error {
	_, err := q.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+quote(PositionTable)+` (
    outbox_table VARCHAR(255) NOT NULL,
    gtid         TEXT NOT NULL,
    binlog_file  VARCHAR(255) NOT NULL,
    binlog_pos   BIGINT UNSIGNED NOT NULL,
    server       VARCHAR(255) NOT NULL,
    saved_at     DATETIME(6) NOT NULL,
    PRIMARY KEY (outbox_table)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin`)
	var my *gosql.MySQLError
	if errors.As(err, &my) && (my.Number == errAccessDenied || my.Number == errSpecificAccess || my.Number == 1044) {
		return &SetupError{Problem: "the relay's user may not create the table " + PositionTable + ", where the binlog reader keeps its position",
			Fix: "run relay-cli migrate --capture binlog as the table's owner, or create it so (docs/operations.md, \"CAPTURE=binlog\")"}
	}
	if err != nil {
		return fmt.Errorf("create %s: %w", PositionTable, err)
	}
	return nil
}

// savedPosition reads the table's saved position; ok is false when none
// is saved.
func savedPosition(ctx context.Context, q querier, key string) (p position, serverID string, ok bool, err error) {
	var pos uint64
	err = q.QueryRowContext(ctx, "SELECT gtid, binlog_file, binlog_pos, server FROM "+quote(PositionTable)+" WHERE outbox_table = ?", key).
		Scan(&p.GTID, &p.File, &pos, &serverID)
	if errors.Is(err, sql.ErrNoRows) {
		return position{}, "", false, nil
	}
	if err != nil {
		return position{}, "", false, fmt.Errorf("read the saved binlog position: %w", err)
	}
	p.Pos = uint32(pos)
	return p, serverID, true, nil
}

// savePosition writes the table's position.
func savePosition(ctx context.Context, q querier, key string, p position, serverID string) error {
	_, err := q.ExecContext(ctx, "INSERT INTO "+quote(PositionTable)+` (outbox_table, gtid, binlog_file, binlog_pos, server, saved_at)
VALUES (?, ?, ?, ?, ?, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE gtid = VALUES(gtid), binlog_file = VALUES(binlog_file), binlog_pos = VALUES(binlog_pos),
    server = VALUES(server), saved_at = VALUES(saved_at)`, key, p.GTID, p.File, p.Pos, serverID)
	if err != nil {
		return fmt.Errorf("save the binlog position: %w", err)
	}
	return nil
}

// tableColumns reads the outbox table's columns in their order, from an
// empty SELECT's result: opening the table waits for a DDL that still
// holds it, where information_schema.COLUMNS leaves a table it cannot open
// out (seen for the moment after an ALTER's event is in the log).
func tableColumns(ctx context.Context, q querier, database, table string) ([]string, error) {
	rows, err := q.QueryContext(ctx, "SELECT * FROM "+quote(database)+"."+quote(table)+" LIMIT 0")
	var my *gosql.MySQLError
	if errors.As(err, &my) && my.Number == errNoSuchTable {
		return nil, &SetupError{Problem: fmt.Sprintf("the outbox table %s.%s does not exist", database, table),
			Fix: "run relay-cli migrate, or set STORAGE_AUTO_MIGRATE=true"}
	}
	if err != nil {
		return nil, fmt.Errorf("read the outbox table's columns: %w", err)
	}
	defer rows.Close()
	names, err := rows.Columns()
	if err != nil {
		return nil, fmt.Errorf("read the outbox table's columns: %w", err)
	}
	return names, rows.Err()
}

// quote quotes an identifier.
func quote(name string) string { return "`" + strings.ReplaceAll(name, "`", "``") + "`" }
