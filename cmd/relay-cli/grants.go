package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

func grantsCommand() *cli.Command {
	return &cli.Command{
		Name:  "grants",
		Usage: "create the least-privilege roles and grant them what they need on the table",
		Description: "Creates the roles outbox_relay (the relay: SELECT, UPDATE), outbox_producer\n" +
			"(applications: INSERT) and outbox_admin (relay-cli: also DELETE) if missing, and grants\n" +
			"them their rights on the table. Run it as the table's owner after migrate; give login\n" +
			"users the roles (PostgreSQL: CREATE ROLE … IN ROLE outbox_relay; MySQL: GRANT outbox_relay\n" +
			"TO … and SET DEFAULT ROLE). --print shows the SQL with these instructions.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "print", Usage: "print the SQL instead of applying it"},
		},
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			store, err := openStore(c)
			if err != nil {
				return err
			}
			defer store.Close()
			if c.Bool("print") {
				_, err := fmt.Fprint(c.App.Writer, store.GrantsSQL())
				return err
			}
			if err := store.ApplyGrants(c.Context); err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "roles outbox_relay, outbox_producer and outbox_admin hold their grants on %s\n", store.Table())
			return nil
		},
	}
}
