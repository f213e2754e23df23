package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/outbox-relay/relay/pkg/capture/pgwal"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/mysql"
)

func grantsCommand() *cli.Command {
	return &cli.Command{
		Name:  "grants",
		Usage: "create the least-privilege roles and grant them what they need on the table",
		Description: "Creates the roles outbox_relay (the relay: SELECT, UPDATE), outbox_producer\n" +
			"(applications: INSERT) and outbox_admin (relay-cli: also DELETE) if missing, and grants\n" +
			"them their rights on the table. Run it as the table's owner after migrate; give login\n" +
			"users the roles (PostgreSQL: CREATE ROLE … IN ROLE outbox_relay; MySQL: GRANT outbox_relay\n" +
			"TO … and SET DEFAULT ROLE). --print shows the SQL with these instructions.\n\n" +
			"--capture wal adds what a relay with CAPTURE=wal needs: the REPLICATION attribute, which\n" +
			"PostgreSQL does not pass on through role membership, so it goes on the relay's login role.\n" +
			"--capture binlog (MySQL/MariaDB) adds what a relay reading the binary log needs, on the\n" +
			"relay's login user: REPLICATION SLAVE and REPLICATION CLIENT (MariaDB 10.5+: BINLOG MONITOR)\n" +
			"on *.*, which are server-wide, and the table outbox_relay_positions beside the outbox table,\n" +
			"which the relay creates. The server's version decides which, so --print connects too.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "print", Usage: "print the SQL instead of applying it"},
			&cli.StringFlag{Name: "capture", Usage: "`MODE` the relays run with: wal (PostgreSQL) adds the replication right, binlog (MySQL/MariaDB) the binary log's"},
			&cli.StringFlag{Name: "login-role", Aliases: []string{"login-user"},
				Usage: "the relay's login `ROLE`, which --capture wal gives REPLICATION; on MySQL/MariaDB its user (relay_app, or 'relay_app'@'10.%'), which --capture binlog gives the binary log's rights"},
		},
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			mode := c.String("capture")
			if err := checkCaptureFlag(c); err != nil {
				return err
			}
			// Opening connects to nothing yet: the driver's checks come
			// before any query.
			store, err := openStore(c)
			if err != nil {
				return err
			}
			defer store.Close()
			if err := checkCaptureStorage(store, mode); err != nil {
				return err
			}
			role := c.String("login-role")
			switch {
			case mode == captureWAL && !c.Bool("print") && role == "":
				return usagef("--capture wal needs --login-role: REPLICATION is not inherited from outbox_relay, so it goes on the role the relay logs in as (or use --print)")
			case mode == captureBinlog && !c.Bool("print") && role == "":
				return usagef("--capture binlog needs --login-role: the binary log's rights are server-wide, so they go on the user the relay logs in as, such as --login-role relay_app or \"'relay_app'@'10.%%'\" (or use --print)")
			}
			if mode == captureWAL && role != "" && !pgwal.Identifier(role) {
				return usagef("--login-role %q: use lowercase letters, digits and underscores", role)
			}
			var binlog binlogGrants
			if mode == captureBinlog {
				if binlog, err = binlogGrantsFor(c, store.(*mysql.Store), role); err != nil {
					return err
				}
			}
			if c.Bool("print") {
				return printGrants(c, store, mode, role, binlog)
			}
			if err := store.ApplyGrants(c.Context); err != nil {
				return err
			}
			switch mode {
			case captureWAL:
				db, _ := store.(storage.SQLDatabase).SQL()
				if _, err := db.ExecContext(c.Context, "ALTER ROLE "+role+" REPLICATION"); err != nil {
					return fmt.Errorf("give %s REPLICATION: %w", role, err)
				}
				fmt.Fprintf(c.App.Writer, "role %s may stream the write-ahead log (REPLICATION)\n", role)
			case captureBinlog:
				db := store.(*mysql.Store).DB()
				for _, stmt := range binlog.statements() {
					if _, err := db.ExecContext(c.Context, stmt); err != nil {
						return fmt.Errorf("%s: %w (the user must exist: CREATE USER first)", stmt, err)
					}
				}
				fmt.Fprintf(c.App.Writer, "user %s may read the binary log (%s) and keep its position in %s\n",
					binlog.account, binlog.rights, binlog.positions)
			}
			fmt.Fprintf(c.App.Writer, "roles outbox_relay, outbox_producer and outbox_admin hold their grants on %s\n", store.Table())
			return nil
		},
	}
}

// binlogGrantsFor are --capture binlog's statements for the login user
// role, a placeholder when it is not given (--print), at the server's
// version.
func binlogGrantsFor(c *cli.Context, store *mysql.Store, role string) (binlogGrants, error) {
	account := "<the relay's login user>"
	if role != "" {
		var ok bool
		if account, ok = parseMySQLAccount(role); !ok {
			return binlogGrants{}, usagef("--login-role %q: name the relay's user as relay_app, relay_app@host or 'relay_app'@'host', with letters, digits and _ . - $ (host also %% and :)", role)
		}
	}
	version, err := serverVersion(c.Context, store)
	if err != nil {
		return binlogGrants{}, err
	}
	return newBinlogGrants(version, store.Database(), account), nil
}

// printGrants is grants --print: the roles' SQL and, with --capture, what
// the login role or user needs beside.
func printGrants(c *cli.Context, store storage.Storage, mode, role string, binlog binlogGrants) error {
	out := c.App.Writer
	if _, err := fmt.Fprint(out, store.GrantsSQL()); err != nil {
		return err
	}
	switch mode {
	case captureWAL:
		if role == "" {
			role = "<the relay's login role>"
		}
		_, err := fmt.Fprintf(out, "\n-- CAPTURE=wal streams the write-ahead log: REPLICATION on the login role\n-- (role membership does not pass it on).\nALTER ROLE %s REPLICATION;\n", role)
		return err
	case captureBinlog:
		if _, err := fmt.Fprint(out, "\n-- CAPTURE=binlog reads the binary log: server-wide rights on the login user\n"+
			"-- (for this server's version), and the table it keeps its position in, which\n"+
			"-- the relay creates (CREATE lets it, and lets GRANT name the table first).\n"); err != nil {
			return err
		}
		for _, stmt := range binlog.statements() {
			if _, err := fmt.Fprintf(out, "%s;\n", stmt); err != nil {
				return err
			}
		}
	}
	return nil
}
