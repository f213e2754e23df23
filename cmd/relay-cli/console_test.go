package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/harness/pgtest"
)

func TestConsoleRefusesAnOpenAddressWithoutAPassword(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		env  []string
		want string
	}{
		{[]string{"console", "--addr", "0.0.0.0:0"}, nil, "set CONSOLE_PASSWORD or --password-file"},
		{[]string{"console", "--addr", "8090"}, nil, "want HOST:PORT"},
		{[]string{"console", "--password-file", pwFile}, []string{"CONSOLE_PASSWORD=x"}, "keep one"},
		{[]string{"console", "--password-file", pwFile + ".missing"}, nil, "--password-file"},
		// The password is never a flag: a command line shows in ps.
		{[]string{"console", "--password", "s3cret"}, nil, "flag provided but not defined: --password"},
		{[]string{"console", "--CONSOLE_PASSWORD", "s3cret"}, nil, "flag provided but not defined"},
		// The console's Config names its field; relay-cli names the flag.
		{[]string{"console", "--refresh", "500ms"}, nil, "relay-cli: --refresh must be at least 1s, got 500ms"},
	} {
		r := cmd{args: onTable(tb, c.args...), env: c.env}.run(t)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("relay-cli %s: want exit 2 saying %q, got\n%s", strings.Join(c.args, " "), c.want, r)
		}
	}
}

// The console serves beyond loopback with a password from a file or from
// CONSOLE_PASSWORD, asks for it, and stops cleanly on SIGINT.
func TestConsoleServesWithAPasswordAndStopsOnInterrupt(t *testing.T) {
	t.Parallel()
	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]cmd{
		"file":     {args: []string{"console", "--addr", "0.0.0.0:0", "--password-file", pwFile}},
		"variable": {args: []string{"console", "--addr", "0.0.0.0:0"}, env: []string{"CONSOLE_PASSWORD=s3cret"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tb := pgtest.New(t)
			c.args = onTable(tb, c.args...)
			serveWithPassword(t, c)
		})
	}
}

func serveWithPassword(t *testing.T, c cmd) {
	t.Helper()
	x, cancel := c.start(t)
	defer cancel()
	stderr, err := x.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stderr)
	var addr string
	for addr == "" && lines.Scan() {
		var entry struct{ Msg, Addr string }
		if json.Unmarshal(lines.Bytes(), &entry) == nil && entry.Msg == "console: listening" {
			addr = strings.Replace(entry.Addr, "0.0.0.0", "127.0.0.1", 1)
			addr = strings.Replace(addr, "[::]", "127.0.0.1", 1)
		}
	}
	if addr == "" {
		t.Fatalf("no listening line on stderr (%v)", lines.Err())
	}
	go func() {
		for lines.Scan() {
		}
	}()
	resp, err := http.Get(addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET / without the password = %d, want 401", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodGet, addr+"/events", nil)
	req.SetBasicAuth("ops", "s3cret")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /events with the password = %d, want 200", resp.StatusCode)
	}
	if err := x.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- x.Wait() }()
	select {
	case err := <-done:
		if code := exitCode(t, err); code != exitOK {
			t.Errorf("exit code %d after SIGINT, want 0", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the console did not stop on SIGINT")
	}
}

// A console on a port something holds exits 1, as the relay does for its
// HTTP_ADDR, naming the setting as it was set (--addr or CONSOLE_ADDR) and
// the way out: another port, shown with the host asked for, or stopping
// what holds it.
func TestConsoleOnATakenPortNamesAddrAndTheWayOut(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(port)
	next := fmt.Sprintf("127.0.0.1:%d", n+1)
	for _, c := range []struct {
		name string
		cmd  cmd
		want string
	}{
		{"--addr", cmd{args: onTable(tb, "console", "--addr", addr)}, "--addr " + addr + " is taken"},
		{"CONSOLE_ADDR", cmd{args: onTable(tb, "console"), env: []string{"CONSOLE_ADDR=" + addr}}, "CONSOLE_ADDR " + addr + " is taken"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := c.cmd.run(t)
			if r.code != exitFailure {
				t.Errorf("want exit code 1:\n%s", r)
			}
			for _, want := range []string{c.want, "choose another port with --addr " + next, "or stop what holds it", "ss -ltnp"} {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, r)
				}
			}
		})
	}
}
