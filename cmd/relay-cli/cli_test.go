package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/relay/internal/harness/pgtest"
)

// binary is relay-cli built with -race once for every test: the tests run
// it as operators do and look at its output, exit code and the table.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "relay-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "relay-cli")
	build := exec.Command("go", "build", "-race", "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build relay-cli:", err)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// secret is a password the tests put in URLs; no output may contain it.
const secret = "Hunter2SecretPw"

// unreachableURL has a password and a port nothing listens on.
const unreachableURL = "postgres://operator:" + secret + "@127.0.0.1:1/outbox?sslmode=disable&connect_timeout=5"

var ctx = context.Background()

type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit code %d\n--- stdout:\n%s--- stderr:\n%s", r.code, r.stdout, r.stderr)
}

// cmd is one relay-cli invocation.
type cmd struct {
	args  []string
	env   []string
	stdin io.Reader
}

func (c cmd) start(t *testing.T) (*exec.Cmd, context.CancelFunc) {
	t.Helper()
	runCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	x := exec.CommandContext(runCtx, binary, c.args...)
	// The tests' own environment must not choose the table.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "STORAGE_URL=") && !strings.HasPrefix(kv, "STORAGE_TABLE_NAME=") {
			x.Env = append(x.Env, kv)
		}
	}
	x.Env = append(x.Env, c.env...)
	x.Stdin = c.stdin
	return x, cancel
}

func (c cmd) run(t *testing.T) result {
	t.Helper()
	x, cancel := c.start(t)
	defer cancel()
	var out, errb bytes.Buffer
	x.Stdout, x.Stderr = &out, &errb
	return result{exitCode(t, x.Run()), out.String(), errb.String()}
}

func exitCode(t *testing.T, err error) int {
	t.Helper()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return exit.ExitCode()
	default:
		t.Fatalf("run relay-cli: %v", err)
		return -1
	}
}

// relayCLI runs relay-cli against tb; the global flags follow the command,
// as operators often type them.
func relayCLI(t *testing.T, tb *pgtest.Table, args ...string) result {
	t.Helper()
	return cmd{args: onTable(tb, args...)}.run(t)
}

func onTable(tb *pgtest.Table, args ...string) []string {
	return append(args, "--storage-url", pgtest.URL(), "--table", tb.Name)
}

// ok fails the test unless r exited 0.
func ok(t *testing.T, r result) result {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("relay-cli failed:\n%s", r)
	}
	return r
}

func decode[T any](t *testing.T, r result) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("stdout is not the JSON expected (%v):\n%s", err, r)
	}
	return v
}

// ---- table helpers -------------------------------------------------------------

// ids lists the event ids in the table, sorted.
func ids(t *testing.T, tb *pgtest.Table) []string {
	t.Helper()
	rows, err := tb.Pool().Query(ctx, "SELECT event_id::text FROM "+tb.Name+" ORDER BY event_id")
	if err != nil {
		t.Fatal(err)
	}
	list, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return list
}

func sorted(ids ...[]uuid.UUID) []string {
	var out []string
	for _, list := range ids {
		for _, id := range list {
			out = append(out, id.String())
		}
	}
	slices.Sort(out)
	return out
}
