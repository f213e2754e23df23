package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/mysqltest"
	"github.com/outbox-relay/relay/internal/harness/natstest"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/outbox"
)

const secret = "Pa55w0rdThatMustNotLeak"

func runRelay(t *testing.T, env map[string]string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code = run(ctx, nil, env, &out, &errb)
	return code, out.String(), errb.String()
}

func TestConfigurationErrorsExit2NamingTheSetting(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"unknown publisher scheme", map[string]string{"PUBLISHER_URL": "carrier-pigeon://coop"},
			[]string{"PUBLISHER_URL", `unknown publisher scheme "carrier-pigeon"`, "nats://", "null://", "stdout://"}},
		// The drivers' names for their brokers and databases, and typing
		// mistakes, get the scheme meant.
		{"rabbitmq scheme", map[string]string{"PUBLISHER_URL": "rabbitmq://guest:" + secret + "@127.0.0.1:5672/"},
			[]string{"PUBLISHER_URL", `unknown publisher scheme "rabbitmq"`, "did you mean amqp://?"}},
		{"nat scheme", map[string]string{"PUBLISHER_URL": "nat://127.0.0.1:4222"},
			[]string{"PUBLISHER_URL", "did you mean nats://?"}},
		{"postgresql+ssl scheme", map[string]string{"STORAGE_URL": "postgresql+ssl://u:" + secret + "@db/app"},
			[]string{"STORAGE_URL", "did you mean postgresql://?"}},
		{"mariadb scheme", map[string]string{"STORAGE_URL": "mariadb://u:" + secret + "@db/app"},
			[]string{"STORAGE_URL", "did you mean mysql://?"}},
		{"unknown storage scheme", map[string]string{"STORAGE_URL": "oracle://u:" + secret + "@db/x"},
			[]string{"STORAGE_URL", "postgres://", "mysql://"}},
		{"MySQL table name injection", map[string]string{"STORAGE_URL": "mysql://u:" + secret + "@localhost/db?table=x%60y"},
			[]string{"STORAGE_URL", "invalid table name"}},
		{"MySQL URL without a database", map[string]string{"STORAGE_URL": "mysql://u:" + secret + "@localhost/"},
			[]string{"STORAGE_URL", "names no database"}},
		{"unparsable duration", map[string]string{"POLL_INTERVAL": "soon"},
			[]string{"POLL_INTERVAL", "duration"}},
		{"zero batch size", map[string]string{"BATCH_SIZE": "0"}, []string{"BATCH_SIZE must be positive"}},
		{"negative batch size", map[string]string{"BATCH_SIZE": "-5"}, []string{"BATCH_SIZE must be positive"}},
		{"batch size not a number", map[string]string{"BATCH_SIZE": "lots"}, []string{"BATCH_SIZE", "integer"}},
		{"table name injection", map[string]string{"STORAGE_TABLE_NAME": "events; DROP TABLE users"},
			[]string{"STORAGE_TABLE_NAME", "invalid table name"}},
		{"table in URL injection", map[string]string{"STORAGE_URL": "postgres://u:" + secret + "@localhost/db?table=x%22y"},
			[]string{"STORAGE_URL", "invalid table name"}},
		{"jitter out of range", map[string]string{"RETRY_JITTER": "2"}, []string{"RETRY_JITTER"}},
		// Without a broker named, printing events and marking them
		// delivered would lose them all.
		{"no PUBLISHER_URL", map[string]string{"PUBLISHER_URL": ""}, []string{"PUBLISHER_URL is not set", "stdout://"}},
		{"bad log format", map[string]string{"LOG_FORMAT": "xml"}, []string{"LOG_FORMAT"}},
		{"bad nats option", map[string]string{"PUBLISHER_URL": "nats://u:" + secret + "@127.0.0.1:1?subjectprefix=x"},
			[]string{"PUBLISHER_URL", "unknown option"}},
		{"unknown format", map[string]string{"PUBLISHER_URL": "nats://u:" + secret + "@127.0.0.1:1?format=avro"},
			[]string{"PUBLISHER_URL", "avro", "is not one of relay", "cloudevents"}},
		{"malformed URL", map[string]string{"PUBLISHER_URL": "nats://u:" + secret + "@[::1"},
			[]string{"PUBLISHER_URL", "malformed"}},
		{"HTTP_ADDR without a colon", map[string]string{"HTTP_ADDR": "8080"},
			[]string{`HTTP_ADDR "8080" is not host:port`, "use :8080"}},
		{"HTTP_ADDR with a scheme", map[string]string{"HTTP_ADDR": "http://0.0.0.0:8080"},
			[]string{"HTTP_ADDR", "is not host:port"}},
		{"negative retention", map[string]string{"DELIVERED_RETENTION": "-7d"},
			[]string{"DELIVERED_RETENTION", "retention (such as 7d"}},
		{"unparsable retention", map[string]string{"DEAD_RETENTION": "a month"},
			[]string{"DEAD_RETENTION", "invalid duration"}},
		{"dead retention zero", map[string]string{"DELIVERED_RETENTION": "0", "DEAD_RETENTION": "0"},
			[]string{"DEAD_RETENTION=0 would delete events the moment they fail"}},
		{"zero retention interval", map[string]string{"DELIVERED_RETENTION": "7d", "RETENTION_INTERVAL": "0s"},
			[]string{"RETENTION_INTERVAL must be positive"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"HTTP_ADDR": "127.0.0.1:0", "PUBLISHER_URL": "null://"}
			for k, v := range c.env {
				env[k] = v
			}
			code, _, stderr := runRelay(t, env)
			if code != 2 {
				t.Fatalf("exit code %d, want 2; stderr:\n%s", code, stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr does not mention %q:\n%s", w, stderr)
				}
			}
			if strings.Contains(stderr, secret) {
				t.Errorf("stderr leaks the password:\n%s", stderr)
			}
			if strings.Contains(stderr, "forgotten driver import") {
				t.Errorf("stderr speaks of Go imports to someone running the binary:\n%s", stderr)
			}
		})
	}
}

func TestUnreachableDatabaseExits1AndSaysSo(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ url, want string }{
		{"postgres://relay:" + secret + "@127.0.0.1:1/outbox?sslmode=disable&connect_timeout=2", "cannot reach PostgreSQL at 127.0.0.1:1"},
		{"mysql://relay:" + secret + "@127.0.0.1:1/outbox?timeout=2s", "cannot reach MySQL at 127.0.0.1:1"},
	} {
		code, _, stderr := runRelay(t, map[string]string{
			"STORAGE_URL":   c.url,
			"PUBLISHER_URL": "null://",
			"HTTP_ADDR":     "127.0.0.1:0",
		})
		if code != 1 {
			t.Fatalf("exit code %d, want 1; stderr:\n%s", code, stderr)
		}
		for _, w := range []string{c.want, "check STORAGE_URL"} {
			if !strings.Contains(stderr, w) {
				t.Errorf("stderr does not say %q:\n%s", w, stderr)
			}
		}
		if strings.Contains(stderr, secret) {
			t.Errorf("stderr leaks the password:\n%s", stderr)
		}
	}
}

// Durations are logged as Go writes them: the MySQL storage, which cannot
// notify the relay, makes it log its POLL_INTERVAL at start, which slog's
// JSON handler would write in nanoseconds (500000000).
func TestDurationsAreLoggedReadably(t *testing.T) {
	t.Parallel()
	code, _, stderr := runRelay(t, map[string]string{
		"STORAGE_URL":        mysqltest.DatabaseURL(mysqltest.NewDatabase(t)),
		"STORAGE_TABLE_NAME": "no_such_outbox_table",
		"PUBLISHER_URL":      "null://",
		"HTTP_ADDR":          "127.0.0.1:0",
		"POLL_INTERVAL":      "500ms",
	})
	if code != 1 {
		t.Fatalf("exit code %d, want 1 (no table); stderr:\n%s", code, stderr)
	}
	if !strings.Contains(stderr, `"msg":"this storage cannot notify the relay of inserts: polling for new events","poll_interval":"500ms"`) {
		t.Errorf("the polling line does not show poll_interval 500ms:\n%s", stderr)
	}
}

func TestMissingTableSaysToMigrate(t *testing.T) {
	t.Parallel()
	mysqlDB := mysqltest.NewDatabase(t)
	for _, c := range []struct{ url, where string }{
		{pgtest.URL(), "PostgreSQL at "},
		{mysqltest.DatabaseURL(mysqlDB), "MySQL at "},
	} {
		code, _, stderr := runRelay(t, map[string]string{
			"STORAGE_URL":        c.url,
			"STORAGE_TABLE_NAME": "no_such_outbox_table",
			"PUBLISHER_URL":      "null://",
			"HTTP_ADDR":          "127.0.0.1:0",
		})
		if code != 1 {
			t.Fatalf("%s: exit code %d, want 1; stderr:\n%s", c.url, code, stderr)
		}
		if !strings.Contains(stderr, "relay-cli migrate") || !strings.Contains(stderr, "STORAGE_AUTO_MIGRATE=true") {
			t.Errorf("stderr does not say how to create the table:\n%s", stderr)
		}
		// Following "run relay-cli migrate" must not create the table in
		// another database: the error names the one it looked in.
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatal(err)
		}
		db := strings.TrimPrefix(u.Path, "/")
		for _, w := range []string{c.where + u.Host, `database \"` + db + `\"`, "table no_such_outbox_table"} {
			if !strings.Contains(stderr, w) {
				t.Errorf("the missing table's error does not name %s:\n%s", w, stderr)
			}
		}
	}
}

// A variable that is no setting but close to one (BACH_SIZE), or to an Open
// Outbox name the relay translates, is named at start with the setting it
// probably meant; the environment's other variables, those of the libraries
// the relay uses and a secret_env the URL names are not.
func TestMisspeltVariablesAreNamed(t *testing.T) {
	t.Parallel()
	code, _, stderr := runRelay(t, map[string]string{
		"STORAGE_URL":                 pgtest.URL(),
		"STORAGE_TABLE_NAME":          "no_such_outbox_table",
		"PUBLISHER_URL":               "null://",
		"HTTP_ADDR":                   "127.0.0.1:0",
		"BACH_SIZE":                   "100",
		"poll_interval":               "1s",
		"KAFKA_COMPRESION":            "gzip",
		"PATH":                        "/usr/bin",
		"PGCONNECT_TIMEOUT":           "5",
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
	})
	if code != 1 {
		t.Fatalf("exit code %d, want 1; stderr:\n%s", code, stderr)
	}
	for _, w := range []string{
		"BACH_SIZE is set but is not a setting of the relay, and is ignored; did you mean BATCH_SIZE?",
		"poll_interval is set but is not a setting of the relay, and is ignored; did you mean POLL_INTERVAL?",
		"did you mean KAFKA_COMPRESSION?",
	} {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr does not say %q:\n%s", w, stderr)
		}
	}
	if n := strings.Count(stderr, "is not a setting of the relay"); n != 3 {
		t.Errorf("%d variables named, want 3:\n%s", n, stderr)
	}

	// A misspelt required variable: the configuration error and the
	// variable meant.
	code, _, stderr = runRelay(t, map[string]string{"PUBLISHER_URLL": "nats://127.0.0.1:4222", "HTTP_ADDR": "127.0.0.1:0"})
	if code != 2 || !strings.Contains(stderr, "PUBLISHER_URL is not set") || !strings.Contains(stderr, "PUBLISHER_URLL is set but is not a setting of the relay, and is ignored; did you mean PUBLISHER_URL?") {
		t.Errorf("PUBLISHER_URLL: exit %d, want 2 naming PUBLISHER_URL:\n%s", code, stderr)
	}
}

// A relay started without STORAGE_URL (unset or misspelt) says that it uses
// the default, and which one, and its missing-table error names that
// database, so that nobody migrates the wrong one.
func TestDefaultStorageURLIsAnnounced(t *testing.T) {
	t.Parallel()
	code, _, stderr := runRelay(t, map[string]string{
		"STORAGE_URLL":       pgtest.URL(),
		"STORAGE_TABLE_NAME": "no_such_outbox_table",
		"PUBLISHER_URL":      "null://",
		"HTTP_ADDR":          "127.0.0.1:0",
	})
	if code != 1 {
		t.Fatalf("exit code %d, want 1; stderr:\n%s", code, stderr)
	}
	for _, w := range []string{
		"STORAGE_URL is not set: using the default postgres://postgres@localhost:5432/postgres",
		`table no_such_outbox_table in PostgreSQL at localhost:5432 database \"postgres\"`,
	} {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr does not say %q:\n%s", w, stderr)
		}
	}
}

// MySQL cannot notify the relay of inserts: without WAKEUP the relay polls
// and says so; WAKEUP=notify there is a configuration mistake.
func TestWakeupOnAStorageThatCannotNotify(t *testing.T) {
	t.Parallel()
	tb := mysqltest.New(t)
	code, _, stderr := runRelay(t, map[string]string{
		"STORAGE_URL":   tb.URL,
		"PUBLISHER_URL": "null://",
		"HTTP_ADDR":     "127.0.0.1:0",
		"WAKEUP":        "notify",
	})
	if code != 2 {
		t.Fatalf("WAKEUP=notify on MySQL: exit code %d, want 2; stderr:\n%s", code, stderr)
	}
	for _, w := range []string{"WAKEUP=notify", "cannot notify", "WAKEUP=poll", "POLL_INTERVAL"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr does not say %q:\n%s", w, stderr)
		}
	}

	// Unset: the relay polls, says so, and delivers.
	tb.InsertN(t, 10, "poll.event")
	r := startRelay(t, map[string]string{"STORAGE_URL": tb.URL, "PUBLISHER_URL": "null://", "POLL_INTERVAL": "50ms"})
	eventually.True(t, 30*time.Second, func() bool { return tb.Counts(t)[outbox.StatusDelivered] == 10 },
		func() string { return "10 events delivered; log:\n" + r.log.String() })
	if log := r.log.String(); !strings.Contains(log, "polling for new events") || !strings.Contains(log, "connecting to MySQL at") {
		t.Errorf("the log does not say the relay polls MySQL:\n%s", log)
	}
}

func TestVersionAndUnknownArguments(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"--version"}, nil, &out, &errb); code != 0 || !strings.Contains(out.String(), "relay "+version) {
		t.Errorf("--version: code %d, output %q", code, out.String())
	}
	if code := run(context.Background(), []string{"--frobnicate"}, nil, &out, &errb); code != 2 {
		t.Errorf("unknown argument: exit %d, want 2", code)
	}
}

// buildRelay compiles this command with the race detector.
func buildRelay(t *testing.T) string {
	t.Helper()
	return buildRelayBinary(t, true)
}

func buildRelayBinary(t testing.TB, race bool) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "relay")
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, ".")...)
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("build relay: %v", err)
	}
	return bin
}

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestSIGTERMDrainsAndExits0 runs the real binary: it auto-migrates a new
// table, relays to NATS, answers /healthz, and on SIGTERM finishes its
// batches, leaves no row DELIVERING and exits 0.
func TestSIGTERMDrainsAndExits0(t *testing.T) {
	t.Parallel()
	bin := buildRelay(t)
	t.Run("PostgreSQL", func(t *testing.T) {
		t.Parallel()
		tb := pgtest.New(t)
		table := strings.TrimSuffix(tb.Name, ".openoutbox_events") + ".fresh_outbox"
		testSIGTERMDrains(t, bin, pgtest.URL(), table, pgtest.Of(t, tb.Store, "", table))
	})
	t.Run("MySQL", func(t *testing.T) {
		t.Parallel()
		tb := mysqltest.New(t)
		table := tb.Database + ".fresh_outbox"
		testSIGTERMDrains(t, bin, mysqltest.URL(), table, &mysqltest.Table{Store: tb.Store, Name: table})
	})
}

// e2eTable is what the end-to-end tests need of a test table, whatever
// its database.
type e2eTable interface {
	InsertN(t testing.TB, n int, eventType string) []uuid.UUID
	Counts(t testing.TB) map[outbox.Status]int
}

func testSIGTERMDrains(t *testing.T, bin, storageURL, table string, fresh e2eTable) {
	srv := natstest.Start(t)
	st := srv.Stream(t, jetstream.StreamConfig{Name: "E2E", Subjects: []string{"e2e.>"}})
	addr := freeAddr(t)

	cmd := exec.Command(bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with the test
	cmd.Env = append(os.Environ(),
		"STORAGE_URL="+storageURL,
		"STORAGE_TABLE_NAME="+table,
		"STORAGE_AUTO_MIGRATE=true",
		"PUBLISHER_URL="+srv.URL(),
		"HTTP_ADDR="+addr,
		"BATCH_SIZE=100",
		"POLL_INTERVAL=50ms",
		"LOG_FORMAT=text",
	)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
	}()

	eventually.True(t, 30*time.Second, func() bool {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var body map[string]string
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode == 200 && body["status"] == "ok"
	}, func() string { return "/healthz 200; relay log:\n" + stderr.String() })
	healthcheck := func() error {
		hc := exec.Command(bin, "healthcheck")
		hc.Env = cmd.Env // a container's health check runs with the relay's environment
		return hc.Run()
	}
	if err := healthcheck(); err != nil {
		t.Errorf("relay healthcheck against a running relay: %v", err)
	}

	const n = 20000
	fresh.InsertN(t, n, "e2e.event")
	eventually.True(t, 30*time.Second, func() bool { return fresh.Counts(t)[outbox.StatusDelivered] > 0 },
		func() string { return "first deliveries; relay log:\n" + stderr.String() })

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("relay exited with %v after SIGTERM; log:\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("relay did not exit within 30s of SIGTERM; log:\n%s", stderr.String())
	}
	c := fresh.Counts(t)
	if c[outbox.StatusDelivering] != 0 {
		t.Fatalf("SIGTERM left %d rows DELIVERING: %v", c[outbox.StatusDelivering], c)
	}
	if got := natstest.Count(t, st); got != uint64(c[outbox.StatusDelivered]) {
		t.Errorf("stream holds %d messages but %d rows are DELIVERED", got, c[outbox.StatusDelivered])
	}
	for _, line := range []string{"relay started", "relay stopped"} {
		if !strings.Contains(stderr.String(), line) {
			t.Errorf("log lacks %q:\n%s", line, stderr.String())
		}
	}
	if err := healthcheck(); err == nil {
		t.Error("relay healthcheck succeeded with no relay running")
	}
}

// A relay whose role may not DELETE exits at start when retention is set,
// saying what to grant, rather than failing every delete-mode settle and
// sending events again once the reaper took them back.
func TestRetentionWithoutDeletePrivilegeExits1(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	role := "nodelete_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	schemaName, _, _ := strings.Cut(tb.Name, ".")
	tb.Exec(t, "CREATE ROLE "+role+" LOGIN")
	t.Cleanup(func() { tb.Exec(t, "DROP OWNED BY "+role); tb.Exec(t, "DROP ROLE "+role) })
	tb.Exec(t, "GRANT USAGE ON SCHEMA "+schemaName+" TO "+role)
	tb.Exec(t, "GRANT SELECT, UPDATE ON {{table}} TO "+role)
	u, err := url.Parse(tb.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	code, _, stderr := runRelay(t, map[string]string{
		"STORAGE_URL": u.String(), "PUBLISHER_URL": "null://", "HTTP_ADDR": "127.0.0.1:0", "DELIVERED_RETENTION": "0",
	})
	if code != 1 || !strings.Contains(stderr, "need DELETE on the table") || !strings.Contains(stderr, "relay-cli grants") {
		t.Errorf("exit %d; stderr:\n%s", code, stderr)
	}
}

// A second relay on a host where the HTTP port is taken exits 1 with a
// message that names HTTP_ADDR, what it serves, and how to choose another
// port.
func TestATakenHTTPPortNamesHTTPAddrAndTheWayOut(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	code, _, stderr := runRelay(t, map[string]string{
		"STORAGE_URL":   tb.URL,
		"PUBLISHER_URL": "null://",
		"HTTP_ADDR":     addr,
	})
	next, _ := strconv.Atoi(port)
	for _, want := range []string{"HTTP_ADDR " + addr + " is taken", "/healthz", fmt.Sprintf("HTTP_ADDR=:%d", next+1)} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
}
