package option_test

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/tlsconfig"
	"github.com/outbox-relay/relay/pkg/publisher/option"
)

// declared are a driver's worth of options of every kind.
type declared struct {
	prefix  *option.String
	mode    *option.String
	key     *option.String
	timeout *option.Duration
	beat    *option.Duration
	size    *option.Int
	db      *option.Int
	flag    *option.Bool
	tls     *option.TLS
	secret  *option.Secret
}

// declare declares them.
func declare() (*option.Set, declared) {
	s := option.New("demo")
	var o declared
	o.prefix = s.String("subject_prefix", "", "Put before the type.")
	o.mode = s.String("mode", "fast", "How.").OneOf("fast", "safe")
	o.key = s.String("header", "", "Sent along.").Repeatable().Secret()
	o.timeout = s.Duration("timeout", 5*time.Second, "Bounds it.")
	o.beat = s.Duration("heartbeat", 10*time.Second, "Beats.").Min(time.Second, "heartbeats count in seconds")
	o.size = s.Int("max_bytes", 1024, "Largest.").Unit("bytes")
	o.db = s.Int("db", 0, "Database.").Min(0).Max(15)
	o.flag = s.Bool("declare", false, "Declares.")
	o.tls = s.TLS(option.TLSDocs{CA: "CA.", CertKey: "Client certificate.", Insecure: "Skips."})
	o.secret = s.SecretSource("secret", "signing secret", "File.", "Variable.")
	return s, o
}

func parse(t *testing.T, s *option.Set, query string) (option.Values, error) {
	t.Helper()
	q, err := url.ParseQuery(query)
	if err != nil {
		t.Fatal(err)
	}
	return s.Parse(q)
}

func TestDefaultsAndValues(t *testing.T) {
	t.Parallel()
	s, o := declare()
	v, err := parse(t, s, "")
	if err != nil {
		t.Fatal(err)
	}
	if o.prefix.Get(v) != "" || o.mode.Get(v) != "fast" || o.timeout.Get(v) != 5*time.Second || o.size.Get(v) != 1024 ||
		o.db.Get(v) != 0 || o.flag.Get(v) || !o.tls.Get(v).IsZero() || !o.secret.Get(v).IsZero() {
		t.Errorf("defaults are not the declared ones")
	}

	// An empty value is no value, as drivers have always read it.
	_, err = parse(t, s, "subject_prefix=app.&mode=safe&header=A:1&header=B:2&timeout=7d&heartbeat=1s&max_bytes=9&db=0&declare=true"+
		"&tls_ca=/ca.pem&tls_cert=/c.pem&tls_key=/k.pem&tls_insecure=true&secret_env=HOOK&max_bytes=")
	if err == nil {
		t.Fatal("max_bytes given twice: no error")
	}
	v, err = parse(t, s, "subject_prefix=app.&mode=safe&header=A:1&header=B:2&timeout=7d&heartbeat=1s&max_bytes=9&db=0&declare=true"+
		"&tls_ca=/ca.pem&tls_cert=/c.pem&tls_key=/k.pem&tls_insecure=true&secret_env=HOOK")
	if err != nil {
		t.Fatal(err)
	}
	if got := o.timeout.Get(v); got != 7*24*time.Hour {
		t.Errorf("timeout=7d read as %s: durations read as internal/duration reads them", got)
	}
	if n, ok := o.db.Lookup(v); !ok || n != 0 {
		t.Errorf("db=0: Lookup = %d, %v", n, ok)
	}
	if got := strings.Join(o.key.All(v), ","); got != "A:1,B:2" {
		t.Errorf("header values %q", got)
	}
	want := tlsconfig.Files{CA: "/ca.pem", Cert: "/c.pem", Key: "/k.pem", Insecure: true}
	if o.prefix.Get(v) != "app." || o.mode.Get(v) != "safe" || o.beat.Get(v) != time.Second || o.size.Get(v) != 9 || !o.flag.Get(v) ||
		o.tls.Get(v) != want || o.secret.Get(v).Env != "HOOK" {
		t.Errorf("values are not the URL's")
	}
}

func TestMistakesNameTheOptionAndTheFix(t *testing.T) {
	t.Parallel()
	s, _ := declare()
	for _, tc := range []struct{ query, want string }{
		{"subjet_prefix=x", `demo URL: unknown option "subjet_prefix" (known: subject_prefix, mode, header, timeout, heartbeat, max_bytes, db, declare, tls_ca, tls_cert, tls_key, tls_insecure, secret_file, secret_env); did you mean subject_prefix?`},
		{"TIMEOUT=1s", "did you mean timeout?"},
		{"timeout=1s&timeout=2s", "demo URL: option timeout is given 2 times; give it once"},
		{"mode=slow", `demo URL: mode="slow" is not one of fast, safe`},
		{"timeout=5", `demo URL: timeout="5" is not a positive duration such as 5s or 7d`},
		{"timeout=0s", `timeout="0s" is not a positive duration`},
		{"timeout=-1s", `timeout="-1s" is not a positive duration`},
		{"heartbeat=500ms", `heartbeat="500ms" is under 1s; heartbeats count in seconds`},
		{"max_bytes=0", `max_bytes="0" is not a positive number of bytes`},
		{"max_bytes=1MB", `max_bytes="1MB" is not a positive number of bytes`},
		{"db=16", `db="16" is not an integer from 0 to 15`},
		{"declare=maybe", `declare="maybe" is not true or false`},
		{"tls_cert=/c.pem", "demo URL: tls_cert and tls_key go together"},
		{"secret_file=", "secret_file and secret_env need a value"},
		{"secret_file=/f&secret_env=E", "secret_file and secret_env both name the signing secret; keep one"},
	} {
		_, err := parse(t, s, tc.query)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.query, err, tc.want)
		}
	}
	// A name far from every option suggests none.
	if _, err := parse(t, s, "colour=red"); err == nil || strings.Contains(err.Error(), "did you mean") {
		t.Errorf("colour=red: %v, want no suggestion", err)
	}
}

func TestSecretValuesStayOutOfErrorsAndLogs(t *testing.T) {
	t.Parallel()
	s := option.New("demo")
	s.Int("limit", 1, "A limit.")
	// api_key is no name redact.URL's patterns know: only the declaration
	// makes it secret.
	s.String("api_key", "", "A key.").Secret().Check(func(string) error { return os.ErrInvalid })
	const secret = "Zq9NotInAnyError"
	if _, err := parse(t, s, "api_key="+secret); err == nil || strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), "api_key=xxxxx") {
		t.Errorf("error for a secret option: %v, want it masked", err)
	}
	raw := "demo://user:" + secret + "@host/?limit=3&api_key=" + secret + "&api_key=" + secret + "2"
	want := "demo://user:xxxxx@host/?limit=3&api_key=xxxxx&api_key=xxxxx"
	if got := s.Redact(raw); got != want {
		t.Errorf("Redact = %q, want %q: the password and the secret option masked, the rest kept as written", got, want)
	}
}

func TestSecretSourceReads(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte("whsec_abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(name string) (string, bool, error) {
		return map[string]string{"SET": "s3cret"}[name], name == "SET", nil
	}
	if text, source, err := (option.SecretRef{File: file}).Read(env); err != nil || text != "whsec_abc\n" || source != "secret_file "+file {
		t.Errorf("from a file: %q, %q, %v", text, source, err)
	}
	if text, source, err := (option.SecretRef{Env: "SET"}).Read(env); err != nil || text != "s3cret" || source != "secret_env SET" {
		t.Errorf("from the environment: %q, %q, %v", text, source, err)
	}
	if _, _, err := (option.SecretRef{Env: "UNSET"}).Read(env); err == nil || !strings.Contains(err.Error(), "secret_env: UNSET is not set or empty") {
		t.Errorf("from an unset variable: %v", err)
	}
	if _, _, err := (option.SecretRef{File: file + ".missing"}).Read(env); err == nil || !strings.Contains(err.Error(), "secret_file: open") {
		t.Errorf("from a missing file: %v", err)
	}
}

func TestTableJoinsRows(t *testing.T) {
	t.Parallel()
	s, _ := declare()
	table := s.Table()
	for _, row := range []string{
		"| Option | Default | Meaning |\n|---|---|---|\n",
		"| `subject_prefix` | none | Put before the type. |\n",
		"| `mode` | `fast` | How. |\n",
		"| `timeout` | `5s` | Bounds it. |\n",
		"| `max_bytes` | `1024` | Largest. |\n",
		"| `declare` | `false` | Declares. |\n",
		"| `tls_cert`, `tls_key` | none | Client certificate. |\n",
	} {
		if !strings.Contains(table, row) {
			t.Errorf("Table() has no row %q:\n%s", row, table)
		}
	}
}
