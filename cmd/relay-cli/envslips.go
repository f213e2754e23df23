package main

import (
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/outbox-relay/relay/internal/spelling"
	"github.com/outbox-relay/relay/pkg/storage/postgres"
)

// readDirectly are variables relay-cli reads without a flag.
var readDirectly = []string{"CONSOLE_PASSWORD"}

// warnEnvSlips names, on stderr, each variable that looks like a misspelt
// one of relay-cli's (STORAGE_URLL), with the one it probably meant: a
// misspelt STORAGE_URL otherwise leaves relay-cli on the default database,
// and `migrate` creates the table where the relay will never look.
func warnEnvSlips(app *cli.App, environ []string, stderr io.Writer) {
	known := append(envVariables(app.Flags, app.Commands), readDirectly...)
	known = append(known, postgres.EnvVariables...)
	for _, s := range spelling.EnvSlips(environ, known) {
		fmt.Fprintf(stderr, "relay-cli: %s is set but is not a variable relay-cli reads, and is ignored; did you mean %s?\n", s.Name, s.Meant)
	}
}

// envVariables are the variables the flags of the app and of every command
// read, so that a command's new variable is known without a list to keep.
func envVariables(flags []cli.Flag, cmds []*cli.Command) []string {
	var names []string
	for _, f := range flags {
		if e, ok := f.(interface{ GetEnvVars() []string }); ok {
			names = append(names, e.GetEnvVars()...)
		}
	}
	for _, c := range cmds {
		names = append(names, envVariables(c.Flags, c.Subcommands)...)
	}
	return names
}
