package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/outbox-relay/relay/pkg/capture/pgwal"
	"github.com/outbox-relay/relay/pkg/storage"
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
			"PostgreSQL does not pass on through role membership, so it goes on the relay's login role.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "print", Usage: "print the SQL instead of applying it"},
			&cli.StringFlag{Name: "capture", Usage: "`MODE` the relays run with: wal adds the replication right"},
			&cli.StringFlag{Name: "login-role", Usage: "the relay's login `ROLE`, which --capture wal gives REPLICATION"},
		},
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			switch c.String("capture") {
			case "", "poll":
			case "wal":
				if !c.Bool("print") && c.String("login-role") == "" {
					return usagef("--capture wal needs --login-role: REPLICATION is not inherited from outbox_relay, so it goes on the role the relay logs in as (or use --print)")
				}
			default:
				return usagef("--capture must be wal or poll, got %q", c.String("capture"))
			}
			store, err := openStore(c)
			if err != nil {
				return err
			}
			defer store.Close()
			wal := c.String("capture") == "wal"
			role := c.String("login-role")
			if wal && role != "" && !pgwal.Identifier(role) {
				return usagef("--login-role %q: use lowercase letters, digits and underscores", role)
			}
			if c.Bool("print") {
				if _, err := fmt.Fprint(c.App.Writer, store.GrantsSQL()); err != nil {
					return err
				}
				if wal {
					if role == "" {
						role = "<the relay's login role>"
					}
					_, err := fmt.Fprintf(c.App.Writer, "\n-- CAPTURE=wal streams the write-ahead log: REPLICATION on the login role\n-- (role membership does not pass it on).\nALTER ROLE %s REPLICATION;\n", role)
					return err
				}
				return nil
			}
			if err := store.ApplyGrants(c.Context); err != nil {
				return err
			}
			if wal {
				db, ok := store.(storage.SQLDatabase)
				if !ok {
					return usagef("--capture wal: only PostgreSQL has a write-ahead log to read")
				}
				sqlDB, _ := db.SQL()
				if _, err := sqlDB.ExecContext(c.Context, "ALTER ROLE "+role+" REPLICATION"); err != nil {
					return fmt.Errorf("give %s REPLICATION: %w", role, err)
				}
				fmt.Fprintf(c.App.Writer, "role %s may stream the write-ahead log (REPLICATION)\n", role)
			}
			fmt.Fprintf(c.App.Writer, "roles outbox_relay, outbox_producer and outbox_admin hold their grants on %s\n", store.Table())
			return nil
		},
	}
}
