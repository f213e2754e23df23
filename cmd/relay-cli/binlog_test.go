package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/outbox-relay/relay/internal/harness/mysqltest"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/internal/mycluster"
)

// grants --capture binlog gives a throwaway user of the shared MariaDB
// what a relay reading the binary log needs: the server-wide rights this
// server's version names, and its position table, which the relay creates.
func TestGrantsCaptureBinlogOnMariaDB(t *testing.T) {
	t.Parallel()
	tb := mysqltest.New(t)
	db := mysqltest.Admin(t)
	// MySQL 8 takes user names of up to 32 characters; the database's
	// name ends in what sets it apart.
	user := "binlog_" + tb.Database[max(0, len(tb.Database)-25):]
	if _, err := db.ExecContext(ctx, "CREATE USER '"+user+"'@'%'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.ExecContext(ctx, "DROP USER IF EXISTS '"+user+"'@'%'") })
	var version string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		t.Fatal(err)
	}
	rights := "REPLICATION SLAVE, REPLICATION CLIENT"
	if isMariaDBAtLeast(version, 10, 5) {
		rights = "REPLICATION SLAVE, BINLOG MONITOR"
	}
	args := []string{"grants", "--storage-url", mysqltest.DatabaseURL(tb.Database), "--table", tb.Name, "--capture", "binlog"}

	printed := ok(t, cmd{args: append(args, "--print", "--login-role", user)}.run(t))
	for _, w := range []string{
		"GRANT SELECT, UPDATE, DELETE ON", // the roles' grants come first
		fmt.Sprintf("GRANT %s ON *.* TO '%s'@'%%';", rights, user),
		fmt.Sprintf("GRANT CREATE, SELECT, INSERT, UPDATE, DELETE ON `%s`.`outbox_relay_positions` TO '%s'@'%%';", tb.Database, user),
	} {
		if !strings.Contains(printed.stdout, w) {
			t.Errorf("grants --capture binlog --print on %s lacks %q:\n%s", version, w, printed.stdout)
		}
	}
	if grants := showGrants(t, user); strings.Contains(grants, "REPLICATION") {
		t.Fatalf("--print applied grants:\n%s", grants)
	}
	if p := ok(t, cmd{args: append(args, "--print")}.run(t)); !strings.Contains(p.stdout, "TO <the relay's login user>;") {
		t.Errorf("--print without --login-role has no placeholder:\n%s", p.stdout)
	}

	r := ok(t, cmd{args: append(args, "--login-user", user+"@%")}.run(t))
	if !strings.Contains(r.stdout, "may read the binary log ("+rights+")") {
		t.Errorf("grants --capture binlog does not say what it gave:\n%s", r)
	}
	grants := showGrants(t, user)
	for _, w := range []string{
		"GRANT " + rights + " ON *.* TO `" + user + "`@`%`",
		"GRANT SELECT, INSERT, UPDATE, DELETE, CREATE ON `" + tb.Database + "`.`outbox_relay_positions` TO `" + user + "`@`%`",
	} {
		if !strings.Contains(grants, w) {
			t.Errorf("SHOW GRANTS lacks %q:\n%s", w, grants)
		}
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{args, "needs --login-role"},
		{append(args[:len(args):len(args)], "--login-role", "x'; DROP USER root; --"), "--login-role"},
		{[]string{"grants", "--storage-url", mysqltest.DatabaseURL(tb.Database), "--table", tb.Name, "--capture", "wal", "--print"}, "use --capture binlog"},
		{[]string{"grants", "--storage-url", mysqltest.DatabaseURL(tb.Database), "--table", tb.Name, "--capture", "log"}, "binlog"},
	} {
		if bad := (cmd{args: c.args}.run(t)); bad.code != 2 || !strings.Contains(bad.stderr, c.want) {
			t.Errorf("%v: exit %d, want 2 saying %q:\n%s", c.args[1:], bad.code, c.want, bad)
		}
	}
}

func showGrants(t *testing.T, user string) string {
	t.Helper()
	rows, err := mysqltest.Admin(t).QueryContext(ctx, "SHOW GRANTS FOR '"+user+"'@'%'")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var all []string
	for rows.Next() {
		var g string
		if err := rows.Scan(&g); err != nil {
			t.Fatal(err)
		}
		all = append(all, g)
	}
	return strings.Join(all, "\n")
}

// --capture binlog names PostgreSQL's own mode, and migrate --capture
// binlog on MySQL creates the position table, warning when the server's
// log cannot serve the relays yet.
func TestCaptureBinlogWhereItApplies(t *testing.T) {
	t.Parallel()
	pg := pgtest.New(t)
	for _, args := range [][]string{{"grants", "--login-role", "relay_app"}, {"migrate"}} {
		sub := args[0]
		bad := cmd{args: append(args, "--storage-url", pgtest.URL(), "--table", pg.Name, "--capture", "binlog")}.run(t)
		if bad.code != 2 || !strings.Contains(bad.stderr, "use --capture wal") {
			t.Errorf("%s --capture binlog on PostgreSQL: exit %d, want 2 naming --capture wal:\n%s", sub, bad.code, bad)
		}
	}
	// The shared server runs without its binary log: migrate creates
	// the position table all the same and warns, naming the fix.
	tb := mysqltest.New(t)
	r := ok(t, cmd{args: []string{"migrate", "--storage-url", mysqltest.DatabaseURL(tb.Database), "--table", tb.Name, "--capture", "binlog"}}.run(t))
	for _, w := range []string{"position table " + tb.Database + ".outbox_relay_positions ready",
		"warning: CAPTURE=binlog relays cannot start on this server yet", "log_bin=OFF", "--log-bin --binlog-format=ROW"} {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("migrate --capture binlog on a server without its log lacks %q:\n%s", w, r)
		}
	}
	var n int
	if err := mysqltest.Admin(t).QueryRowContext(ctx, "SELECT count(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'outbox_relay_positions'",
		tb.Database).Scan(&n); err != nil || n != 1 {
		t.Errorf("migrate --capture binlog made no position table (%d, %v)", n, err)
	}
	// Again, on a server whose log serves: no warning, nothing changed.
	c := mycluster.Start(t, mycluster.Options{})
	at := mysqltest.NewAt(t, c.URL(""))
	for range 2 {
		r = ok(t, cmd{args: []string{"migrate", "--storage-url", c.URL(at.Database), "--table", at.Name, "--capture", "binlog"}}.run(t))
		if !strings.Contains(r.stderr, "outbox_relay_positions ready") || strings.Contains(r.stderr, "warning") {
			t.Errorf("migrate --capture binlog on a server with its log:\n%s", r)
		}
	}
	if bad := (cmd{args: []string{"migrate", "--storage-url", mysqltest.DatabaseURL(tb.Database), "--table", tb.Name, "--capture", "wal"}}.run(t)); bad.code != 2 || !strings.Contains(bad.stderr, "use --capture binlog") {
		t.Errorf("migrate --capture wal on MySQL: exit %d, want 2 naming --capture binlog:\n%s", bad.code, bad)
	}
}

func TestIsMariaDBAtLeast(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]bool{
		"10.11.19-MariaDB-0+deb12u1": true,
		"10.5.2-MariaDB":             true,
		"11.4.3-MariaDB-log":         true,
		"10.4.34-MariaDB":            false,
		"8.0.36":                     false,
		"8.4.2-0ubuntu0.24.04.1":     false,
	} {
		if got := isMariaDBAtLeast(v, 10, 5); got != want {
			t.Errorf("isMariaDBAtLeast(%q, 10, 5) = %v, want %v", v, got, want)
		}
	}
	if g := newBinlogGrants("8.0.36", "app", "'r'@'%'"); g.rights != "REPLICATION SLAVE, REPLICATION CLIENT" {
		t.Errorf("MySQL 8: %q", g.rights)
	}
	if a, ok := parseMySQLAccount("'relay_app'@'10.%'"); !ok || a != "'relay_app'@'10.%'" {
		t.Errorf("parseMySQLAccount: %q %v", a, ok)
	}
	if a, ok := parseMySQLAccount("relay_app"); !ok || a != "'relay_app'@'%'" {
		t.Errorf("parseMySQLAccount(relay_app): %q %v", a, ok)
	}
}
