package quickstart

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/amqptest"
	"github.com/outbox-relay/relay/internal/harness/natstest"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
)

// marker precedes the quickstart's shell block in README.md.
const marker = "<!-- quickstart"

// quickstart returns the lines of README.md's quickstart block.
func quickstart(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, marker)
	if i < 0 {
		t.Fatalf("README.md has no %q before its quickstart", marker)
	}
	s = s[i:]
	start := strings.Index(s, "```sh\n")
	if start < 0 {
		t.Fatal("README.md's quickstart has no ```sh block")
	}
	s = s[start+len("```sh\n"):]
	end := strings.Index(s, "```")
	if end < 0 {
		t.Fatal("README.md's quickstart block does not end")
	}
	return strings.Split(strings.TrimRight(s[:end], "\n"), "\n")
}

var exportLine = regexp.MustCompile(`^export (STORAGE_URL|PUBLISHER_URL)='[^']*'`)

// TestReadmeQuickstart runs README.md's quickstart as a newcomer pastes it,
// with three changes only: the two exported URLs name this test's database
// and NATS server, `make build` is done by the test (the same two
// packages, into the directory the lines run in), and the last line, the
// console, which runs until Ctrl-C, is started on a free port and asked for
// the event before it is stopped. Every line must succeed; the event must
// reach the stream, show DELIVERED in stats, list and the console, and no
// default database may be used.
func TestReadmeQuickstart(t *testing.T) {
	t.Parallel()
	lines := quickstart(t)
	dir := t.TempDir()
	build(t, dir)
	storageURL := database(t)
	nats := natstest.Start(t)

	var script []string
	var console string
	for i, line := range lines {
		switch {
		case strings.HasPrefix(line, "make build"):
			continue
		case exportLine.MatchString(line):
			name := exportLine.FindStringSubmatch(line)[1]
			value := map[string]string{"STORAGE_URL": storageURL, "PUBLISHER_URL": nats.URL()}[name]
			line = exportLine.ReplaceAllString(line, "export "+name+"='"+value+"'")
		case strings.HasPrefix(line, "bin/relay-cli console"):
			if i != len(lines)-1 {
				t.Fatal("the console runs until Ctrl-C: it must be the quickstart's last line")
			}
			console = line
			continue
		}
		script = append(script, line)
	}
	if console == "" {
		t.Fatal("the quickstart does not show the console")
	}
	// The relay's HTTP server must not take a port another test uses; the
	// quickstart leaves HTTP_ADDR at its default.
	env := cleanEnv("HTTP_ADDR="+freeAddr(t), "CONSOLE_ADDR="+freeAddr(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, errOut, report := runScript(t, ctx, dir, script, env)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`table openoutbox_events is ready \(\d+ created, 0 already existed\)`),
		regexp.MustCompile(`(?m)^created +stream OUTBOX +subjects orders\.>, duplicate window 2m0s, 0 messages$`),
		regexp.MustCompile(`(?m)^exists +stream OUTBOX +subjects orders\.>, duplicate window 2m0s, 1 message$`),
		regexp.MustCompile(`(?m)^DELIVERED +1\b`),
		regexp.MustCompile(`(?m)^[0-9a-f-]{36} +orders\.paid +order-42 +DELIVERED\b`),
	} {
		if !want.MatchString(out) {
			t.Errorf("the quickstart's output does not match %s\n%s", want, report)
		}
	}
	// migrate says where the table went: the exported database.
	db := strings.TrimPrefix(mustParse(t, storageURL).Path, "/")
	if !strings.Contains(errOut, `relay-cli: migrating PostgreSQL at `) || !strings.Contains(errOut, `database "`+db+`"`) {
		t.Errorf("migrate does not say it migrates database %s\n%s", db, report)
	}
	checkClean(t, errOut, report)

	// The console's last line: the event, DELIVERED.
	consoleCmd := exec.CommandContext(ctx, "bash", "-c", "exec "+console)
	consoleCmd.Dir, consoleCmd.Env = dir, append(env, "STORAGE_URL="+storageURL)
	var consoleErr bytes.Buffer
	consoleCmd.Stderr = &consoleErr
	if err := consoleCmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = consoleCmd.Process.Kill(); _ = consoleCmd.Wait() }()
	addr := strings.TrimPrefix(env[len(env)-1], "CONSOLE_ADDR=")
	var page string
	eventually.True(t, 20*time.Second, func() bool {
		res, err := http.Get("http://" + addr + "/events")
		if err != nil {
			return false
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		page = string(b)
		return res.StatusCode == http.StatusOK
	}, func() string { return "the console answers: " + consoleErr.String() })
	if !strings.Contains(page, "orders.paid") || !strings.Contains(page, "DELIVERED") {
		t.Errorf("the console's events page does not show the event DELIVERED:\n%s\n--- console stderr:\n%s", page, consoleErr.String())
	}
}

// runScript runs the quickstart's lines in dir, as one shell script that
// stops at the first failing line, and returns what they wrote on stdout
// and stderr, and a report of both with the relay's log, for failures.
// dir is made a git repository with the repository's .gitignore first, and
// the lines must leave nothing new in its git status.
func runScript(t *testing.T, ctx context.Context, dir string, script, env []string) (stdout, stderr, report string) {
	t.Helper()
	before := gitStatus(t, initRepo(t, dir))
	sh := exec.CommandContext(ctx, "bash", "-e", "-c", strings.Join(script, "\n"))
	sh.Dir, sh.Env = dir, env
	var out, errb bytes.Buffer
	sh.Stdout, sh.Stderr = &out, &errb
	err := sh.Run()
	relayLog, _ := os.ReadFile(filepath.Join(dir, "relay.log"))
	report = fmt.Sprintf("--- stdout:\n%s--- stderr:\n%s--- relay.log:\n%s", out.String(), errb.String(), relayLog)
	if err != nil {
		t.Fatalf("the quickstart failed: %v\n%s", err, report)
	}
	// The quickstart runs in the repository: what it writes (relay.log)
	// must not show in the reader's git status.
	if after := gitStatus(t, dir); after != before {
		t.Errorf("the quickstart leaves files that git status shows in the repository (.gitignore should cover them):\n"+
			"--- before:\n%s--- after:\n%s", before, after)
	}
	return out.String(), errb.String() + string(relayLog), report
}

// checkClean fails the test when the quickstart's stderr or the relay's log
// shows a setting the quickstart got wrong, or the relay did not stop as
// kill %1 should stop it.
func checkClean(t *testing.T, stderr, report string) {
	t.Helper()
	for _, bad := range []string{"STORAGE_URL is not set", "is not a setting", "did you mean"} {
		if strings.Contains(stderr, bad) {
			t.Errorf("the quickstart's output says %q\n%s", bad, report)
		}
	}
	if !strings.Contains(stderr, `"msg":"relay stopped"`) {
		t.Errorf("kill %%1 did not stop the relay cleanly\n%s", report)
	}
}

// rabbitMQLines are the README's two lines for RabbitMQ, in the list under
// the quickstart.
var rabbitMQLines = regexp.MustCompile("\\*\\*RabbitMQ\\*\\*: `(export PUBLISHER_URL='([^']*)')`;\\s*`(bin/relay-cli setup-broker [^`]*)`")

// TestReadmeQuickstartOnRabbitMQ runs the quickstart with the README's two
// lines for RabbitMQ in place of NATS's, against the local RabbitMQ: the
// exchange and queue it names get names of this test's own (deleted at its
// end), since the server is shared.
func TestReadmeQuickstartOnRabbitMQ(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := rabbitMQLines.FindStringSubmatch(string(b))
	if m == nil {
		t.Fatal("README.md has no RabbitMQ lines (**RabbitMQ**: `export PUBLISHER_URL=…`; `bin/relay-cli setup-broker …`)")
	}
	readmeURL, setup := mustParse(t, m[2]), m[3]
	if readmeURL.Query().Get("exchange") == "" || !strings.Contains(setup, "--name ") {
		t.Fatalf("the RabbitMQ lines name no exchange or queue, which this test renames: %s; %s", m[1], setup)
	}
	suffix := randomHex()
	exchange, queue := "quickstart-ex-"+suffix, "quickstart-q-"+suffix
	t.Cleanup(func() { amqptest.DeleteQueue(t, queue); amqptest.DeleteExchange(t, exchange) })
	query := readmeURL.Query()
	query.Set("exchange", exchange)
	publisherURL := amqptest.DriverURL("", query.Encode())
	setup = regexp.MustCompile(`--name \S+`).ReplaceAllString(setup, "--name "+queue)

	dir := t.TempDir()
	build(t, dir)
	storageURL := database(t)
	var script []string
	for _, line := range quickstart(t) {
		switch {
		case strings.HasPrefix(line, "make build"), strings.HasPrefix(line, "bin/relay-cli console"):
			continue
		case strings.HasPrefix(line, "export STORAGE_URL="):
			line = "export STORAGE_URL='" + storageURL + "'"
		case strings.HasPrefix(line, "export PUBLISHER_URL="):
			line = "export PUBLISHER_URL='" + publisherURL + "'"
		case strings.HasPrefix(line, "bin/relay-cli setup-broker"):
			line = setup
		}
		script = append(script, line)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, errOut, report := runScript(t, ctx, dir, script, cleanEnv("HTTP_ADDR="+freeAddr(t)))
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^created +exchange ` + exchange + ` +type topic`),
		regexp.MustCompile(`(?m)^created +queue ` + queue + ` +bound to exchange ` + exchange + ` with orders\.#, 0 messages$`),
		regexp.MustCompile(`(?m)^exists +queue ` + queue + ` +bound to exchange ` + exchange + ` with orders\.#, 1 message$`),
		regexp.MustCompile(`(?m)^DELIVERED +1\b`),
	} {
		if !want.MatchString(out) {
			t.Errorf("the quickstart's output does not match %s\n%s", want, report)
		}
	}
	checkClean(t, errOut, report)
}

// initRepo makes dir a git repository with the repository's .gitignore,
// so that git status there shows what the quickstart's lines would leave
// in a checkout, and returns dir.
func initRepo(t *testing.T, dir string) string {
	t.Helper()
	ignore, err := os.ReadFile("../../.gitignore")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".gitignore"), ignore, 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, dir, "init", "--quiet")
	return dir
}

// gitStatus is `git status --porcelain` in dir, every untracked file
// listed.
func gitStatus(t *testing.T, dir string) string {
	t.Helper()
	return git(t, dir, "status", "--porcelain", "--untracked-files=all")
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	// Not the repository the test runs in, nor the user's settings.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GIT_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1", "GIT_CEILING_DIRECTORIES="+filepath.Dir(dir))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %s: %v", strings.Join(args, " "), err)
	}
	return string(out)
}

func randomHex() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// build compiles the commands `make build` compiles into dir/bin.
func build(t *testing.T, dir string) {
	t.Helper()
	for _, c := range []string{"relay", "relay-cli"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "bin", c), "../../cmd/"+c)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", c, err, out)
		}
	}
}

// database creates a database of the test's own, where the quickstart's
// default table name is free, and drops it at the end.
func database(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	name := "quickstart_" + randomHex()
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, pgtest.URL())
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Error(err)
		}
	})
	u, err := url.Parse(pgtest.URL())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// cleanEnv is the test's environment without the variables the quickstart
// sets or relies on being unset, plus extra.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "STORAGE_"), strings.HasPrefix(name, "PUBLISHER_"),
			strings.HasPrefix(name, "CONSOLE_"), name == "HTTP_ADDR", strings.HasPrefix(name, "PG"):
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

func mustParse(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
