package redis_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"maps"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	goredis "github.com/redis/go-redis/v9"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/redistest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/publisher/publishertest"
	"github.com/outbox-relay/relay/pkg/publisher/redis"
)

func parse(t *testing.T, raw string) (redis.Config, error) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("url.Parse(%q): %v", raw, err)
	}
	return redis.ParseURL(u)
}

func TestParseURL(t *testing.T) {
	t.Parallel()
	defaults := redis.Config{
		Addr: "r:6379", MaxEntryBytes: 512 << 20, DialTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second,
		WriteTimeout: 5 * time.Second, PoolSize: 10, ClientName: "outbox-relay",
	}
	good := []struct {
		name, url string
		want      func(c *redis.Config)
	}{
		{"defaults", "redis://r", func(*redis.Config) {}},
		{"database in the path", "redis://r:6380/3", func(c *redis.Config) { c.Addr, c.DB = "r:6380", 3 }},
		{"database as an option", "redis://r/?db=2", func(c *redis.Config) { c.DB = 2 }},
		{"database both ways, agreeing", "redis://r/4?db=4", func(c *redis.Config) { c.DB = 4 }},
		{"password only", "redis://:s3cr3t@r", func(c *redis.Config) { c.Password = "s3cr3t" }},
		{"ACL user", "redis://relay:s3cr3t@r", func(c *redis.Config) { c.User, c.Password = "relay", "s3cr3t" }},
		{"user without password", "redis://relay@r", func(c *redis.Config) { c.User = "relay" }},
		{"IPv6", "redis://[::1]:6390", func(c *redis.Config) { c.Addr = "[::1]:6390" }},
		{"TLS", "rediss://r?tls_ca=/ca.pem&tls_cert=/c.pem&tls_key=/k.pem&tls_insecure=true", func(c *redis.Config) {
			c.TLS, c.TLSCA, c.TLSCert, c.TLSKey, c.TLSInsecure = true, "/ca.pem", "/c.pem", "/k.pem", true
		}},
		{"every other option", "redis://r?stream_prefix=app:&maxlen=100000&max_entry_bytes=1048576&dial_timeout=2s" +
			"&read_timeout=3s&write_timeout=4s&pool_size=4&client_name=orders-relay", func(c *redis.Config) {
			c.StreamPrefix, c.MaxLen, c.MaxEntryBytes = "app:", 100000, 1<<20
			c.DialTimeout, c.ReadTimeout, c.WriteTimeout = 2*time.Second, 3*time.Second, 4*time.Second
			c.PoolSize, c.ClientName = 4, "orders-relay"
		}},
		{"no client name", "redis://r?client_name=", func(c *redis.Config) { c.ClientName = "" }},
	}
	for _, tc := range good {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := parse(t, tc.url)
			if err != nil {
				t.Fatal(err)
			}
			want := defaults
			tc.want(&want)
			if fmt.Sprintf("%+v", cfg) != fmt.Sprintf("%+v", want) {
				t.Errorf("got  %+v\nwant %+v", cfg, want)
			}
		})
	}

	const secret = "s3cr3t-pw"
	bad := []struct{ name, url, want string }{
		{"unknown option", "redis://relay:" + secret + "@r?stream_prefx=a", `unknown option "stream_prefx" (known: stream_prefix, maxlen, max_entry_bytes, db,`},
		{"go-redis option we do not take", "redis://:" + secret + "@r?max_retries=3", `unknown option "max_retries"`},
		{"no host", "redis://relay:" + secret + "@/0", "has no host"},
		{"several hosts", "redis://:" + secret + "@r1:6379,r2:6379", "one host only"},
		{"bad port", "redis://:" + secret + "@r:99999", "invalid port"},
		{"path not a number", "redis://:" + secret + "@r/orders", `path "/orders" is not a database number`},
		{"path too deep", "redis://r/0/1", `path "/0/1"`},
		{"negative db", "redis://r?db=-1", `db="-1"`},
		{"db contradicts path", "redis://:" + secret + "@r/1?db=2", "db=2 contradicts the path's database 1"},
		{"maxlen zero", "redis://r?maxlen=0", `maxlen="0" is not a positive number of entries`},
		{"maxlen with tilde", "redis://r?maxlen=~1000", `maxlen="~1000"`},
		{"max_entry_bytes word", "redis://r?max_entry_bytes=1MB", `max_entry_bytes="1MB"`},
		{"pool_size zero", "redis://r?pool_size=0", `pool_size="0"`},
		{"timeout without unit", "redis://:" + secret + "@r?read_timeout=5", `read_timeout="5" is not a positive duration`},
		{"negative timeout", "redis://r?dial_timeout=-1s", `dial_timeout="-1s"`},
		{"client name with a space", "redis://r?client_name=my%20relay", "client_name"},
		{"tls option without rediss", "redis://:" + secret + "@r?tls_ca=/ca.pem", "need a rediss:// URL"},
		{"tls_cert without tls_key", "rediss://r?tls_cert=/c.pem", "tls_cert and tls_key go together"},
		{"tls_insecure not a bool", "rediss://r?tls_insecure=maybe", `tls_insecure="maybe"`},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := parse(t, tc.url)
			publishertest.RequireRefused(t, tc.url, err, tc.want, secret)
		})
	}

	t.Run("schemes registered", func(t *testing.T) {
		t.Parallel()
		for _, raw := range []string{"redis://r:6379", "rediss://r:6380"} {
			if err := publisher.Check(raw); err != nil {
				t.Error(err)
			}
		}
	})
}

// event is an outbox event of type typ with key and a header.
func event(typ, key string, n int) outbox.Event {
	return outbox.Event{
		ID:           uuid.Must(uuid.NewV7()),
		Type:         typ,
		PartitionKey: key,
		Payload:      []byte(fmt.Sprintf(`{"n":%d}`, n)),
		Headers:      []byte(`{"tenant":"acme"}`),
	}
}

func TestEntryHasOpenOutboxFields(t *testing.T) {
	t.Parallel()
	admin := redistest.Shared(t)
	prefix := redistest.Prefix(t, admin)
	pub := openPublisher(t, redistest.URL()+"?stream_prefix="+prefix)

	binary := []byte{0, 0xff, 0xfe, '\n', 'x'} // not UTF-8: bytes arrive as they are
	keyed := outbox.Event{
		ID:           uuid.Must(uuid.NewV7()),
		Type:         "orders.created",
		PartitionKey: "customer-7",
		Payload:      binary,
		Headers: []byte(`{"content-type":"application/octet-stream","seq":3,"replayed":false,"gone":null,` +
			`"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","X-Event-ID":"forged","x-partition-key":"forged"}`),
	}
	unkeyed := outbox.Event{ID: uuid.Must(uuid.NewV7()), Type: "orders.created"}
	publishertest.RequireDelivered(t, publishertest.Publish(t, pub, keyed, unkeyed))

	got := redistest.Entries(t, admin, prefix+"orders.created", 2)
	if len(got) != 2 {
		t.Fatalf("stream holds %d entries, want 2", len(got))
	}
	want := []map[string]any{{
		"id":             keyed.ID.String(),
		"payload":        string(binary),
		"partition_key":  "customer-7",
		"h:content-type": "application/octet-stream",
		"h:seq":          "3",
		"h:replayed":     "false",
		"h:traceparent":  "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	}, {
		// No partition_key field for a NULL key, and an empty payload.
		"id":      unkeyed.ID.String(),
		"payload": "",
	}}
	for i := range want {
		if !maps.Equal(got[i].Values, want[i]) {
			t.Errorf("entry %d fields\n got  %v\n want %v", i, got[i].Values, want[i])
		}
	}
}

func TestMaxLenCapsStreams(t *testing.T) {
	t.Parallel()
	admin := redistest.Shared(t)
	prefix := redistest.Prefix(t, admin)
	capped := openPublisher(t, redistest.URL()+"?stream_prefix="+prefix+"&maxlen=50")
	uncapped := openPublisher(t, redistest.URL()+"?stream_prefix="+prefix)

	const n = 1000
	for _, c := range []struct {
		typ string
		pub publisher.Publisher
	}{{"capped", capped}, {"uncapped", uncapped}} {
		batch := make([]outbox.Event, n)
		for i := range batch {
			batch[i] = event(c.typ, "", i)
		}
		publishertest.RequireDelivered(t, publishertest.Publish(t, c.pub, batch...))
	}
	ctx := context.Background()
	if got := admin.XLen(ctx, prefix+"uncapped").Val(); got != n {
		t.Errorf("uncapped stream holds %d entries, want %d", got, n)
	}
	// MAXLEN ~ trims only whole nodes of stream-node-max-entries (100 by
	// default), which is cheaper than exact trimming to 50: more than 50
	// entries stay, fewer than 50 + 100.
	if got := admin.XLen(ctx, prefix+"capped").Val(); got <= 50 || got >= 150 {
		t.Errorf("capped stream holds %d entries, want 51 to 149 (approximately 50)", got)
	}
	last, err := admin.XRevRangeN(ctx, prefix+"capped", "+", "-", 1).Result()
	if err != nil || len(last) != 1 || last[0].Values["payload"] != fmt.Sprintf(`{"n":%d}`, n-1) {
		t.Errorf("newest capped entry %v (%v), want the last event sent", last, err)
	}
}

func TestDatabaseNumber(t *testing.T) {
	t.Parallel()
	shared := redistest.Shared(t)
	u, err := url.Parse(redistest.URL())
	if err != nil {
		t.Fatal(err)
	}
	db3 := redistest.Client(t, "redis://"+u.Host+"/3")
	prefix := redistest.Prefix(t, db3)
	t.Cleanup(func() { redistest.DeletePrefix(t, shared, prefix) })

	for _, raw := range []string{"redis://" + u.Host + "/3?stream_prefix=" + prefix, "redis://" + u.Host + "?db=3&stream_prefix=" + prefix} {
		pub := openPublisher(t, raw)
		publishertest.RequireDelivered(t, publishertest.Publish(t, pub, event("db", "", 0)))
	}
	ctx := context.Background()
	if got := db3.XLen(ctx, prefix+"db").Val(); got != 2 {
		t.Errorf("database 3 holds %d entries, want 2", got)
	}
	if got := shared.Exists(ctx, prefix+"db").Val(); got != 0 {
		t.Error("the stream is in database 0 too")
	}

	// A database the server does not have: no event is to blame.
	pub := openPublisher(t, "redis://"+u.Host+"/99")
	if err := pub.Ping(ctx); err == nil || !strings.Contains(err.Error(), "DB index is out of range") {
		t.Errorf("Ping on database 99: %v, want the server's refusal", err)
	}
	for i, err := range publishertest.Publish(t, pub, event("db", "", 1), event("db", "", 2)) {
		if !publisher.IsUnavailable(err) || !strings.Contains(err.Error(), "DB index is out of range") {
			t.Errorf("event %d to database 99: %v, want unavailable naming the refusal", i, err)
		}
	}
}

func TestOpenSucceedsWithNothingListening(t *testing.T) {
	t.Parallel()
	const secret = "Zq9Secret"
	dead := "127.0.0.1:1" // a privileged port no parallel test can take
	pub := openPublisher(t, "redis://relay:"+secret+"@"+dead+"?dial_timeout=2s")
	err := pub.Ping(context.Background())
	if err == nil || !strings.Contains(err.Error(), dead) {
		t.Errorf("Ping with nothing listening: %v, want an error naming %s", err, dead)
	}
	began := time.Now()
	errs := publishertest.Publish(t, pub, event("x", "k", 0), event("x", "k", 1))
	for i, err := range errs {
		if !publisher.IsUnavailable(err) || publisher.IsPermanent(err) {
			t.Errorf("event %d with nothing listening: %v, want unavailable", i, err)
		}
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("Publish with nothing listening took %s", took)
	}
	for _, e := range append(errs, err) {
		if e != nil && strings.Contains(e.Error(), secret) {
			t.Errorf("error %q reveals the password", e)
		}
	}

	missing := filepath.Join(t.TempDir(), "missing.pem")
	for _, q := range []string{"?tls_ca=" + missing, "?tls_cert=" + missing + "&tls_key=" + missing} {
		if _, err := publisher.Open(context.Background(), "rediss://"+dead+q); err == nil || !strings.Contains(err.Error(), "missing.pem") {
			t.Errorf("Open with %s: %v, want an error naming the file", q, err)
		}
	}
}

// silentAddr accepts connections and never answers, like a server that
// hangs or a firewall that swallows packets.
func silentAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return l.Addr().String()
}

func TestServerThatNeverAnswersIsUnavailableWithinTheTimeouts(t *testing.T) {
	t.Parallel()
	pub := openPublisher(t, "redis://"+silentAddr(t)+"?read_timeout=500ms&write_timeout=500ms&dial_timeout=500ms")
	began := time.Now()
	for i, err := range publishertest.Publish(t, pub, event("x", "k", 0), event("x", "k", 1)) {
		if !publisher.IsUnavailable(err) {
			t.Errorf("event %d to a silent server: %v, want unavailable", i, err)
		}
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("Publish to a silent server took %s, want about the 500ms timeouts", took)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := pub.Ping(ctx); err == nil {
		t.Error("Ping to a silent server succeeded")
	}
}

func TestACLUser(t *testing.T) {
	t.Parallel()
	const password = "Zq9AclPassw0rd"
	srv := redistest.Start(t)
	admin := redistest.Client(t, srv.URL())
	ctx := context.Background()
	// The least a relay needs: XADD and PING on its own streams.
	for _, rule := range [][]any{
		{"ACL", "SETUSER", "relay", "on", ">" + password, "~orders:*", "+xadd", "+ping"},
		{"ACL", "SETUSER", "reader", "on", ">" + password, "~orders:*", "+xrange", "+ping"},
	} {
		if err := admin.Do(ctx, rule...).Err(); err != nil {
			t.Fatalf("%v: %v", rule, err)
		}
	}
	host := strings.TrimPrefix(srv.URL(), "redis://")

	relay := openPublisher(t, "redis://relay:"+password+"@"+host+"?stream_prefix=orders:")
	if err := relay.Ping(ctx); err != nil {
		t.Fatalf("Ping as an ACL user allowed XADD and PING: %v", err)
	}
	errs := publishertest.Publish(t, relay, event("created", "k", 0))
	publishertest.RequireDelivered(t, errs)

	// A stream outside the user's key pattern: this event's problem, which
	// an operator fixes in the ACL; the others still flow.
	other := openPublisher(t, "redis://relay:"+password+"@"+host+"?stream_prefix=payments:")
	errs = publishertest.Publish(t, other, event("created", "k", 0))
	if err := errs[0]; err == nil || publisher.IsPermanent(err) || publisher.IsUnavailable(err) || !strings.Contains(err.Error(), "may not write stream") {
		t.Errorf("XADD outside the key pattern: %v, want a retryable error about the ACL", err)
	}

	cases := []struct{ name, url, want string }{
		{"wrong password", "redis://relay:wrong-" + password + "@" + host + "?stream_prefix=orders:", "WRONGPASS"},
		{"no XADD permission", "redis://reader:" + password + "@" + host + "?stream_prefix=orders:", "NOPERM"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pub := openPublisher(t, tc.url)
			errs := publishertest.Publish(t, pub, event("created", "k", 0), event("created", "k", 1))
			for i, err := range errs {
				if !publisher.IsUnavailable(err) || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("event %d: %v, want unavailable naming %s", i, err, tc.want)
				}
				if err != nil && strings.Contains(err.Error(), password) {
					t.Errorf("error %q reveals the password", err)
				}
			}
		})
	}
	t.Run("wrong password fails Ping", func(t *testing.T) {
		pub := openPublisher(t, cases[0].url)
		if err := pub.Ping(ctx); err == nil || strings.Contains(err.Error(), password) {
			t.Errorf("Ping with a wrong password: %v, want an error without the password", err)
		}
	})
}

func TestServerStatesAreUnavailable(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
		// setup, when given, puts the server in the state.
		setup func(t *testing.T, admin *goredis.Client)
		want  string
	}{
		// A replica of a primary that is not there, as after a failover
		// that made this node a replica: it refuses writes.
		{"read-only replica", []string{"--replicaof", "127.0.0.1", "1"}, nil, "READONLY"},
		// Any write is refused once used memory is above maxmemory, however
		// small the entry.
		{"out of memory", []string{"--maxmemory", "1"}, nil, "OOM"},
		{"busy script", []string{"--busy-reply-threshold", "50"}, busyScript, "BUSY"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t, tc.args...)
			admin := redistest.Client(t, srv.URL())
			if tc.setup != nil {
				tc.setup(t, admin)
			}
			pub := openPublisher(t, srv.URL())
			for i, err := range publishertest.Publish(t, pub, event("orders", "k", 0), event("orders", "k", 1)) {
				if !publisher.IsUnavailable(err) || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("event %d: %v, want unavailable naming %s", i, err, tc.want)
				}
			}
		})
	}
}

// busyScript runs a Lua script that never ends until the test does, and
// waits until the server answers BUSY.
func busyScript(t *testing.T, admin *goredis.Client) {
	t.Helper()
	ctx := context.Background()
	// The script holds its own connection.
	runner := goredis.NewClient(&goredis.Options{Addr: admin.Options().Addr, ReadTimeout: -1, MaxRetries: -1})
	done := make(chan struct{})
	go func() { _ = runner.Eval(ctx, "while true do end", nil).Err(); close(done) }()
	t.Cleanup(func() {
		_ = admin.ScriptKill(ctx).Err()
		<-done
		_ = runner.Close()
	})
	var last error
	eventually.True(t, 10*time.Second, func() bool {
		last = admin.Ping(ctx).Err()
		return last != nil && strings.HasPrefix(last.Error(), "BUSY")
	}, func() string { return fmt.Sprintf("the server to answer BUSY, last %v", last) })
}

func TestTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := func(name string) string { return filepath.Join(dir, name) }
	ca, caKey := newCert(t, nil, nil, "outbox test CA", dir, "ca")
	newCert(t, ca, caKey, "127.0.0.1", dir, "server")
	newCert(t, ca, caKey, "relay", dir, "client")
	// Mutual TLS: the server wants a client certificate signed by the CA.
	srv := redistest.StartTLS(t, redistest.TLSFiles{Cert: file("server.pem"), Key: file("server-key.pem"), CA: file("ca.pem")})
	admin := redistest.Client(t, srv.URL())
	prefix := redistest.Prefix(t, admin)

	client := "&tls_cert=" + file("client.pem") + "&tls_key=" + file("client-key.pem")
	for _, tc := range []struct {
		name, url string
		works     bool
	}{
		{"CA and client certificate", "rediss://" + srv.TLSAddr() + "?tls_ca=" + file("ca.pem") + client, true},
		{"insecure with client certificate", "rediss://" + srv.TLSAddr() + "?tls_insecure=true" + client, true},
		{"no client certificate", "rediss://" + srv.TLSAddr() + "?tls_ca=" + file("ca.pem"), false},
		{"system roots only", "rediss://" + srv.TLSAddr() + "?dial_timeout=2s" + client, false},
		{"no TLS", "redis://" + srv.TLSAddr() + "?read_timeout=2s", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pub := openPublisher(t, tc.url+"&stream_prefix="+prefix)
			err := pub.Ping(context.Background())
			if tc.works != (err == nil) {
				t.Fatalf("Ping: %v, want success %v", err, tc.works)
			}
			errs := publishertest.Publish(t, pub, event("tls", "k", 0))
			if tc.works {
				publishertest.RequireDelivered(t, errs)
			} else if !publisher.IsUnavailable(errs[0]) {
				t.Errorf("publish without a working TLS setup: %v, want unavailable (the events are not to blame)", errs[0])
			}
		})
	}
}

// newCert writes name.pem and name-key.pem to dir: a CA when parent is nil,
// else a certificate for host signed by parent.
func newCert(t *testing.T, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, host, dir, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	}
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for file, block := range map[string]*pem.Block{
		name + ".pem":     {Type: "CERTIFICATE", Bytes: der},
		name + "-key.pem": {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, file), pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return cert, key
}

func TestCloseEndsPublishing(t *testing.T) {
	t.Parallel()
	pub := openPublisher(t, redistest.URL())
	if err := pub.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	errs := publishertest.Publish(t, pub, event("x", "", 0))
	if !publisher.IsUnavailable(errs[0]) || !strings.Contains(errs[0].Error(), "closed") {
		t.Errorf("Publish after Close: %v, want unavailable: closed", errs[0])
	}
	if err := pub.Ping(context.Background()); err == nil {
		t.Error("Ping after Close succeeded")
	}
}

func TestConnectionsAreNamed(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin := redistest.Client(t, srv.URL())
	for _, name := range []string{"", "orders-relay"} {
		query := ""
		if name != "" {
			query = "?client_name=" + name
		}
		pub := openPublisher(t, srv.URL()+query)
		if err := pub.Ping(context.Background()); err != nil {
			t.Fatal(err)
		}
		if name == "" {
			name = redis.ClientNameDefault
		}
		if list := admin.ClientList(context.Background()).Val(); !strings.Contains(list, " name="+name+" ") {
			t.Errorf("CLIENT LIST shows no connection named %s:\n%s", name, list)
		}
	}
}

func TestEventWithoutStreamNameIsRefused(t *testing.T) {
	t.Parallel()
	pub := openPublisher(t, redistest.URL())
	errs := publishertest.Publish(t, pub, outbox.Event{ID: uuid.Must(uuid.NewV7())})
	if !publisher.IsPermanent(errs[0]) || !strings.Contains(errs[0].Error(), "invalid stream name") {
		t.Errorf("event without type or prefix: %v, want permanent: invalid stream name", errs[0])
	}
}
