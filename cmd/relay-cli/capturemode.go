package main

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/outbox-relay/relay/pkg/capture/binlog"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/mysql"
	"github.com/outbox-relay/relay/pkg/storage/postgres"
)

// Capture modes of --capture, as CAPTURE names them.
const (
	capturePoll   = "poll"
	captureWAL    = "wal"
	captureBinlog = "binlog"
)

// checkCaptureFlag is the check of --capture's value, before anything
// connects.
func checkCaptureFlag(c *cli.Context) error {
	switch mode := c.String("capture"); {
	case mode == "" && !c.IsSet("capture"), mode == capturePoll, mode == captureWAL, mode == captureBinlog:
		return nil
	default:
		return usagef("--capture must be wal (PostgreSQL), binlog (MySQL/MariaDB) or poll, got %q", mode)
	}
}

// checkCaptureStorage says when --capture names a log the table's database
// does not have, and which mode it does have.
func checkCaptureStorage(store storage.Storage, mode string) error {
	_, isPG := store.(*postgres.Store)
	_, isMySQL := store.(*mysql.Store)
	switch {
	case mode == captureWAL && !isPG && isMySQL:
		return usagef("--capture wal: only PostgreSQL has a write-ahead log to read; on MySQL/MariaDB use --capture binlog")
	case mode == captureWAL && !isPG:
		return usagef("--capture wal: only PostgreSQL has a write-ahead log to read")
	case mode == captureBinlog && !isMySQL && isPG:
		return usagef("--capture binlog: only MySQL/MariaDB have a binary log to read; on PostgreSQL use --capture wal")
	case mode == captureBinlog && !isMySQL:
		return usagef("--capture binlog: only MySQL/MariaDB have a binary log to read")
	}
	return nil
}

// mysqlAccount is a login user as --login-role gives it on MySQL: user,
// user@host or 'user'@'host' (host % when left out). The characters are
// those of ordinary names, so the account can go into SQL as it is.
var mysqlAccount = regexp.MustCompile("^['`\"]?([A-Za-z0-9_.$-]{1,80})['`\"]?(?:@['`\"]?([A-Za-z0-9_.%:-]{1,255})['`\"]?)?$")

// parseMySQLAccount returns the account quoted for SQL: 'user'@'host'.
func parseMySQLAccount(s string) (string, bool) {
	m := mysqlAccount.FindStringSubmatch(s)
	if m == nil {
		return "", false
	}
	host := m[2]
	if host == "" {
		host = "%"
	}
	return "'" + m[1] + "'@'" + host + "'", true
}

// binlogGrants are what a CAPTURE=binlog relay's login user needs beside
// outbox_relay's rights on the table.
type binlogGrants struct {
	// account is the login user, 'user'@'host'.
	account string
	// rights are the server-wide rights, for a server whose VERSION() was
	// read: reading the binary log (REPLICATION SLAVE) and seeing its files
	// and position (REPLICATION CLIENT, which MariaDB 10.5 split up: BINLOG
	// MONITOR there).
	rights string
	// positions is the table the relay keeps its position in, qualified.
	positions string
}

func newBinlogGrants(version, database, account string) binlogGrants {
	g := binlogGrants{account: account, rights: "REPLICATION SLAVE, REPLICATION CLIENT",
		positions: quoteMySQL(database) + "." + quoteMySQL(binlog.PositionTable)}
	if isMariaDBAtLeast(version, 10, 5) {
		g.rights = "REPLICATION SLAVE, BINLOG MONITOR"
	}
	return g
}

// statements are the GRANTs. CREATE on the position table lets the relay
// create it, and only it, and lets the GRANT name it before it exists
// (without CREATE, error 1146: the table does not exist).
func (g binlogGrants) statements() []string {
	return []string{
		fmt.Sprintf("GRANT %s ON *.* TO %s", g.rights, g.account),
		fmt.Sprintf("GRANT CREATE, SELECT, INSERT, UPDATE, DELETE ON %s TO %s", g.positions, g.account),
	}
}

func quoteMySQL(name string) string { return "`" + strings.ReplaceAll(name, "`", "``") + "`" }

// isMariaDBAtLeast reports whether version (SELECT VERSION()) is MariaDB's,
// major.minor or later.
func isMariaDBAtLeast(version string, major, minor int) bool {
	if !strings.Contains(strings.ToLower(version), "mariadb") {
		return false
	}
	m := leadingVersion.FindStringSubmatch(version)
	if m == nil {
		return false
	}
	maj, _ := strconv.Atoi(m[1])
	min, _ := strconv.Atoi(m[2])
	return maj > major || maj == major && min >= minor
}

var leadingVersion = regexp.MustCompile(`^(\d+)\.(\d+)`)

// serverVersion is the MySQL/MariaDB server's VERSION().
func serverVersion(ctx context.Context, store *mysql.Store) (string, error) {
	var v string
	if err := store.DB().QueryRowContext(ctx, "SELECT VERSION()").Scan(&v); err != nil {
		return "", fmt.Errorf("read the server's version, which decides the binary log's grants: %w", err)
	}
	return v, nil
}
