package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/outbox-relay/relay/internal/spelling"
	"github.com/outbox-relay/relay/pkg/storage/postgres"
)

// warnEnvSlips names, on stderr, each variable that looks like a misspelt
// one of relay-cli's (STORAGE_URLL), with the one it probably meant: a
// misspelt STORAGE_URL otherwise leaves relay-cli on the default database,
// and `migrate` creates the table where the relay will never look.
func warnEnvSlips(app *cli.App, environ []string, stderr io.Writer) {
	known := append(envVariables(app.Flags, app.Commands), postgres.EnvVariables...)
	for _, s := range spelling.EnvSlips(environ, known) {
		fmt.Fprintf(stderr, "relay-cli: %s is set but is not a variable relay-cli reads, and is ignored; did you mean %s?\n", s.Name, s.Meant)
	}
}

// envVariables are the variables the flags of the app and of every command
// read, and their env-only settings (envOnly), so that a command's new
// variable is known without a list to keep.
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

// envOnly is a setting read from the environment alone, declared among a
// command's flags so that it is known where they are: the misspelt-
// variable warning finds its variable (GetEnvVars), the operations guide's
// test its documentation. It is no flag: it registers nothing in the flag
// set, so the command line cannot carry it (a secret there shows in ps),
// and help does not list it (it is no cli.VisibleFlag); the command's
// description names it. Apply reads it when the command parses its flags,
// before its Action runs.
type envOnly struct {
	EnvVar string
	value  string
}

var _ cli.Flag = (*envOnly)(nil)

func (e *envOnly) Apply(*flag.FlagSet) error { e.value = os.Getenv(e.EnvVar); return nil }

// Names is empty: there is no --name to give it by.
func (e *envOnly) Names() []string      { return nil }
func (e *envOnly) IsSet() bool          { return e.value != "" }
func (e *envOnly) String() string       { return e.EnvVar }
func (e *envOnly) GetEnvVars() []string { return []string{e.EnvVar} }

// Value is the variable's value, "" when it is unset.
func (e *envOnly) Value() string { return e.value }
