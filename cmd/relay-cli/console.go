package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/outbox-relay/relay/internal/console"
	pkgconfig "github.com/outbox-relay/relay/internal/fieldcheck"
	"github.com/outbox-relay/relay/internal/listen"
	"github.com/outbox-relay/relay/internal/logfmt"
)

// consoleAddrDefault keeps the console on this machine unless asked.
const consoleAddrDefault = "127.0.0.1:8090"

// consoleFields names the console.Config fields relay-cli sets by the
// flags that set them, for the console's FieldErrors.
var consoleFields = map[string]string{"console.Refresh": "--refresh"}

func consoleCommand() *cli.Command {
	password := &envOnly{EnvVar: "CONSOLE_PASSWORD"}
	return &cli.Command{
		Name:  "console",
		Usage: "serve the web console: overview, event search, event detail, retry of DEAD events",
		Description: "Serves the console on --addr until interrupted. It reads and changes the table\n" +
			"only as the other commands do. Listening beyond loopback needs a password\n" +
			"(CONSOLE_PASSWORD or --password-file): browsers log in with any user name and\n" +
			"it as the password, scripts send it as a bearer token. --read-only turns the\n" +
			"actions off. See docs/console.md.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "addr", Value: consoleAddrDefault, EnvVars: []string{"CONSOLE_ADDR"}, Usage: "listen on `HOST:PORT`"},
			&cli.BoolFlag{Name: "read-only", EnvVars: []string{"CONSOLE_READ_ONLY"}, Usage: "refuse every action that changes rows"},
			&cli.StringFlag{Name: "password-file", EnvVars: []string{"CONSOLE_PASSWORD_FILE"}, Usage: "read the password from `FILE` (its first line)"},
			password,
			&cli.StringFlag{Name: "refresh", Value: "5s", Usage: "how often the overview reloads itself (`DURATION`)"},
			slotFlag(),
		},
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			addr, addrName := c.String("addr"), settingName(c, "addr")
			if _, _, err := net.SplitHostPort(addr); err != nil {
				return usagef("%s %q: want HOST:PORT, such as %s", addrName, addr, consoleAddrDefault)
			}
			password, err := consolePassword(c, password.Value())
			if err != nil {
				return err
			}
			if password == "" && !console.Loopback(addr) {
				return usagef("%s %s listens beyond loopback: set CONSOLE_PASSWORD or --password-file, or listen on 127.0.0.1", addrName, addr)
			}
			refresh, err := parseDuration(c.String("refresh"))
			if err != nil {
				return usagef("--refresh: %w", err)
			}
			store, err := openStore(c)
			if err != nil {
				return err
			}
			defer store.Close()
			logger := slog.New(slog.NewJSONHandler(c.App.ErrWriter, &slog.HandlerOptions{ReplaceAttr: logfmt.ReplaceAttr}))
			slotName := c.String("slot")
			h, err := console.New(store, console.Config{ReadOnly: c.Bool("read-only"), Password: password,
				Refresh: refresh, Logger: logger,
				Slot: func(ctx context.Context) (*console.Slot, error) {
					s, err := walSlot(ctx, store, slotName, "")
					if s == nil || err != nil {
						return nil, err
					}
					return &console.Slot{Name: s.Name, Active: s.Active, WALStatus: s.WALStatus, RetainedBytes: s.RetainedBytes}, nil
				},
				Binlog: func(ctx context.Context) (*console.BinlogPosition, error) {
					b, err := binlogPosition(ctx, store)
					if b == nil || err != nil {
						return nil, err
					}
					p := &console.BinlogPosition{Active: b.Active, Saved: b.Saved.String(),
						Age: time.Duration(b.LagSeconds * float64(time.Second)), BehindBytes: b.BehindBytes, BehindFiles: b.BehindFiles}
					if b.ServerPosition != nil {
						p.Server = b.ServerPosition.String()
					}
					return p, nil
				}})
			if err != nil {
				return usagef("%w", pkgconfig.Rename(err, func(pkg, field string) string { return consoleFields[pkg+"."+field] }))
			}
			return serveConsole(c.Context, addr, addrName, h, logger)
		},
	}
}

// consolePassword is env, CONSOLE_PASSWORD's value, or the first line of
// --password-file; setting both is a mistake.
func consolePassword(c *cli.Context, env string) (string, error) {
	file := c.String("password-file")
	if file == "" {
		return env, nil
	}
	if env != "" {
		return "", usagef("both CONSOLE_PASSWORD and --password-file are set: keep one")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", usagef("--password-file: %w", err)
	}
	pw, _, _ := strings.Cut(string(b), "\n")
	pw = strings.TrimRight(pw, "\r")
	if pw == "" {
		return "", usagef("--password-file %s: the first line is empty", file)
	}
	return pw, nil
}

// serveConsole serves h on addr, which the setting addrName set (--addr
// or CONSOLE_ADDR), until ctx ends, then lets requests in flight finish
// for a few seconds. A taken port is explained as the relay explains its
// HTTP_ADDR's.
func serveConsole(ctx context.Context, addr, addrName string, h http.Handler, logger *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		host, _, _ := net.SplitHostPort(addr)
		return fmt.Errorf("console: %w", listen.Error(addr, err, listen.Taken{
			Setting: addrName,
			Holder:  "another relay-cli console on this host",
			Serves:  "the console serves its pages there",
			Fix: func(next string) string {
				return "choose another port with --addr " + net.JoinHostPort(host, next)
			},
			Fallback: "8091",
		}))
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	logger.Info("console: listening", "addr", "http://"+ln.Addr().String())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("console: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("console: shut down: %w", err)
	}
	return nil
}
