package redact_test

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/outbox-relay/relay/internal/redact"
)

const secret = "Sup3rS3cretPW"

func TestURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want string
	}{
		{
			name: "postgres",
			in:   "postgres://relay:" + secret + "@db.example.com:5432/app?sslmode=require",
			want: "postgres://relay:xxxxx@db.example.com:5432/app?sslmode=require",
		},
		{
			name: "amqp",
			in:   "amqp://guest:" + secret + "@localhost:5672/",
			want: "amqp://guest:xxxxx@localhost:5672/",
		},
		{
			name: "empty user",
			in:   "nats://:" + secret + "@localhost:4222",
			want: "nats://:xxxxx@localhost:4222",
		},
		{
			name: "multi-host kafka",
			in:   "kafka://u:" + secret + "@h1:9092,h2:9092",
			want: "kafka://u:xxxxx@h1:9092,h2:9092",
		},
		{
			name: "multi-host postgres",
			in:   "postgres://u:" + secret + "@h1:5432,h2:5432/app?target_session_attrs=read-write",
			want: "postgres://u:xxxxx@h1:5432,h2:5432/app?target_session_attrs=read-write",
		},
		{
			name: "url.Parse rejects: bad port",
			in:   "postgres://u:" + secret + "@host:notaport/app",
			want: "postgres://u:xxxxx@host:notaport/app",
		},
		{
			name: "url.Parse rejects: control character",
			in:   "postgres://u:" + secret + "@host/app\x7f",
			want: "postgres://u:xxxxx@host/app\x7f",
		},
		{
			name: "url.Parse rejects: slash in password",
			in:   "postgres://u:Sup3r/S3cretPW@host/app",
			want: "postgres://u:xxxxx@host/app",
		},
		{
			name: "at sign in password",
			in:   "postgres://u:Sup3r@S3cretPW@host/app",
			want: "postgres://u:xxxxx@host/app",
		},
		{
			// Azure Database for PostgreSQL user names have the form
			// user@server; url.Parse splits at the last '@'.
			name: "at sign in user name",
			in:   "postgres://relay@myserver:" + secret + "@myserver.postgres.database.azure.com:5432/app",
			want: "postgres://relay@myserver:xxxxx@myserver.postgres.database.azure.com:5432/app",
		},
		{
			name: "password query parameter",
			in:   "postgres://db/app?user=relay&password=" + secret + "&sslmode=disable",
			want: "postgres://db/app?user=relay&password=xxxxx&sslmode=disable",
		},
		{
			name: "sslpassword query parameter",
			in:   "postgres://db/app?sslpassword=" + secret,
			want: "postgres://db/app?sslpassword=xxxxx",
		},
		{
			name: "query parameter names are case-insensitive",
			in:   "postgres://db/app?Password=" + secret,
			want: "postgres://db/app?Password=xxxxx",
		},
		{
			name: "token and nkey parameters",
			in:   "nats://h:4222?token=" + secret + "&nkey=" + secret,
			want: "nats://h:4222?token=xxxxx&nkey=xxxxx",
		},
		{
			name: "webhook header and query options",
			in:   "https://hooks.example/in?secret_file=/run/s&header=X-Api-Key:" + secret + "&query=code=" + secret + "&timeout=5s",
			want: "https://hooks.example/in?secret_file=/run/s&header=xxxxx&query=xxxxx&timeout=5s",
		},
		{
			name: "userinfo and query parameter",
			in:   "postgres://u:" + secret + "@db/app?sslpassword=" + secret,
			want: "postgres://u:xxxxx@db/app?sslpassword=xxxxx",
		},
		{
			name: "key=value connection string",
			in:   "host=db user=relay password=" + secret + " dbname=app",
			want: "host=db user=relay password=xxxxx dbname=app",
		},
		{
			name: "URL inside an error message",
			in:   `dial "postgres://u:` + secret + `@db:5432/app": connection refused`,
			want: `dial "postgres://u:xxxxx@db:5432/app": connection refused`,
		},
		{
			// url.Parse rejects it, and the pattern for "user:password@"
			// cannot see across the space.
			name: "space in password",
			in:   "amqp://u:Sup3r S3cretPW@mq:5672/",
			want: "amqp://u:xxxxx@mq:5672/",
		},
		{
			name: "tab in password",
			in:   "postgres://u:Sup3r\tS3cretPW@db/app",
			want: "postgres://u:xxxxx@db/app",
		},
		{
			name: "spaces and at signs in password",
			in:   "amqp://u:Sup3r S3c@ret PW@mq/",
			want: "amqp://u:xxxxx@mq/",
		},
		{
			name: "space in password, quoted in an error with another URL after it",
			in:   `malformed publisher URL "amqp://u:Sup3r S3cretPW@mq/vh": expected scheme://host`,
			want: `malformed publisher URL "amqp://u:xxxxx@mq/vh": expected scheme://host`,
		},
		{
			name: "space in password, then another URL",
			in:   "storage postgres://u:Sup3r S3cretPW@db/app publisher amqp://g:" + secret + "@mq/",
			want: "storage postgres://u:xxxxx@db/app publisher amqp://g:xxxxx@mq/",
		},
		{
			name: "space in password after an Azure user name",
			in:   "postgres://relay@myserver:Sup3r S3cretPW@myserver.postgres.database.azure.com/app",
			want: "postgres://relay@myserver:xxxxx@myserver.postgres.database.azure.com/app",
		},
		{
			name: "NATS token",
			in:   "nats://" + secret + "@nats.example.com:4222",
			want: "nats://xxxxx@nats.example.com:4222",
		},
		{
			name: "NATS token with TLS and several servers",
			in:   "TLS://" + secret + "@h1:4222,h2:4222?name=relay",
			want: "TLS://xxxxx@h1:4222,h2:4222?name=relay",
		},
		{
			name: "NATS token in an error",
			in:   `connect to "nats://` + secret + `@h:4222": authorization violation`,
			want: `connect to "nats://xxxxx@h:4222": authorization violation`,
		},
		{
			name: "two URLs in one message",
			in:   "storage postgres://u:" + secret + "@db/app publisher amqp://g:" + secret + "@mq/",
			want: "storage postgres://u:xxxxx@db/app publisher amqp://g:xxxxx@mq/",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := redact.URL(tt.in)
			if got != tt.want {
				t.Errorf("URL(%q)\n got %q\nwant %q", tt.in, got, tt.want)
			}
			for _, part := range []string{secret, "S3cretPW"} {
				if strings.Contains(got, part) {
					t.Errorf("URL(%q) = %q still contains %q", tt.in, got, part)
				}
			}
		})
	}
}

func TestURLLeavesURLsWithoutSecretsUnchanged(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		"",
		"stdout://",
		"null://",
		"postgres://db.example.com:5432/app?sslmode=disable&table=app.outbox",
		"postgres://relay@db.example.com:5432/app",
		"postgres://relay@db.example.com/app",
		"kafka://h1:9092,h2:9092,h3:9092?topic_prefix=events.",
		"kafka://relay@h1:9092,h2:9092",
		"nats://localhost:4222",
		"amqp://localhost:5672/vhost?exchange=events",
		"http://[::1]:8080/metrics",
		"cannot reach PostgreSQL at db:5432 as user \"relay\": connection refused",
		"postgres://db/app?application_name=relay&pool_max_conns=10",
		"postgres://db/app?passwordless=true",
		// Log text after a URL is not taken for a password with spaces.
		"dial nats://h:4222 failed: authorization violation for user bob@example.com",
		"dial nats://h:4222: i/o timeout (ops@example.com)",
		"postgres://db:5432/app: connection refused; mail admin@example.com",
		"http://[::1]:8080/metrics scraped by prometheus@monitoring",
		"dial tcp://host: no route to host; contact ops@example.com",
		"kafka://relay@h1:9092 said: user bob@corp.example rejected",
		"GET https://example.com/path: 404 for bob@example.com",
		`{"storage":"postgres://db:5432/app","error":"role relay@myserver does not exist"}`,
		"storage postgres://u:xxxxx@db/app failed for relay@myserver",
		"nats://localhost:4222 and nats://h2:4222 sent by bob@example.com",
	} {
		if got := redact.URL(in); got != in {
			t.Errorf("URL(%q) = %q, want it unchanged", in, got)
		}
	}
}

func TestURLIsIdempotent(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		"postgres://u:" + secret + "@db/app?password=" + secret,
		"amqp://u:Sup3r S3cretPW@mq/ failed for bob@example.com",
		"nats://" + secret + "@h:4222",
	} {
		once := redact.URL(in)
		if twice := redact.URL(once); twice != once {
			t.Errorf("URL(URL(x)) = %q, want %q", twice, once)
		}
	}
}

func TestError(t *testing.T) {
	t.Parallel()
	rawURL := "postgres://relay:" + secret + "@db.example.com:5432/app"
	tests := []struct {
		name string
		err  error
		urls []string
		want string
	}{
		{
			name: "nil",
			err:  nil,
			urls: []string{rawURL},
			want: "",
		},
		{
			name: "URL quoted whole",
			err:  fmt.Errorf("cannot parse %q: bad", rawURL),
			urls: []string{rawURL},
			want: `cannot parse "postgres://relay:xxxxx@db.example.com:5432/app": bad`,
		},
		{
			name: "bare password",
			err:  errors.New("authentication failed: password " + secret + " rejected"),
			urls: []string{rawURL},
			want: "authentication failed: password xxxxx rejected",
		},
		{
			name: "bare password of a percent-encoded URL",
			err:  errors.New("authentication failed for Sup3r@S3cret/PW"),
			urls: []string{"postgres://relay:" + url.QueryEscape("Sup3r@S3cret/PW") + "@db/app"},
			want: "authentication failed for xxxxx",
		},
		{
			name: "password of the second URL",
			err:  errors.New("token " + secret + " expired"),
			urls: []string{"stdout://", "nats://u:" + secret + "@h:4222"},
			want: "token xxxxx expired",
		},
		{
			name: "bare NATS token",
			err:  errors.New("token " + secret + " rejected"),
			urls: []string{"nats://" + secret + "@h:4222"},
			want: "token xxxxx rejected",
		},
		{
			name: "URLs not in the message are still scrubbed by pattern",
			err:  errors.New("dial amqp://guest:" + secret + "@mq:5672/: refused"),
			urls: nil,
			want: "dial amqp://guest:xxxxx@mq:5672/: refused",
		},
		{
			name: "nothing secret",
			err:  errors.New("connection refused"),
			urls: []string{"postgres://db/app"},
			want: "connection refused",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := redact.Error(tt.err, tt.urls...)
			if got != tt.want {
				t.Errorf("Error()\n got %q\nwant %q", got, tt.want)
			}
			if strings.Contains(got, "S3cret") {
				t.Errorf("Error() = %q leaks the password", got)
			}
		})
	}
}
