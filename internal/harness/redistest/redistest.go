// Package redistest gives tests streams of their own on a real Redis: the
// shared server at TEST_REDIS_URL, or redis://127.0.0.1:6379, which `make
// test` starts, with a unique key prefix whose keys are deleted when the test
// ends; or, for tests that must stop the server, a redis-server process of
// the test's own on a free port, which it can shut down and start again
// with its data.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	goredis "github.com/redis/go-redis/v9"

	"github.com/outbox-relay/relay/internal/eventually"
)

// DefaultURL is the server `make test` provides.
const DefaultURL = "redis://127.0.0.1:6379"

// URL is the shared test server's URL: TEST_REDIS_URL, or DefaultURL.
func URL() string {
	if u := os.Getenv("TEST_REDIS_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// Client connects to the server at rawURL for setting up and reading back,
// and is closed at the end of the test.
func Client(t testing.TB, rawURL string) *goredis.Client {
	t.Helper()
	opts, err := goredis.ParseURL(rawURL)
	if err != nil {
		t.Fatalf("redistest: %s: %v", rawURL, err)
	}
	c := goredis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("redistest: Redis at %s does not answer: %v (is it running? `make test` starts it)", opts.Addr, err)
	}
	return c
}

// Shared connects to the shared test server.
func Shared(t testing.TB) *goredis.Client {
	t.Helper()
	return Client(t, URL())
}

// Prefix returns a key prefix no other test uses. Every key under it is
// deleted at the end of the test.
func Prefix(t testing.TB, c *goredis.Client) string {
	t.Helper()
	prefix := "test:" + uuid.NewString() + ":"
	t.Cleanup(func() { DeletePrefix(t, c, prefix) })
	return prefix
}

// DeletePrefix deletes every key that starts with prefix, which must hold
// no glob characters.
func DeletePrefix(t testing.TB, c *goredis.Client, prefix string) {
	t.Helper()
	ctx := context.Background()
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Errorf("redistest: cleanup: scan %s*: %v", prefix, err)
		return
	}
	if len(keys) > 0 {
		if err := c.Del(ctx, keys...).Err(); err != nil {
			t.Errorf("redistest: cleanup: delete %d keys: %v", len(keys), err)
		}
	}
}

// Entries waits until stream holds at least want entries, or 30 seconds
// pass, and returns all of them in stream order.
func Entries(t testing.TB, c *goredis.Client, stream string, want int) []goredis.XMessage {
	t.Helper()
	ctx := context.Background()
	var n int64
	eventually.True(t, 30*time.Second, func() bool {
		var err error
		if n, err = c.XLen(ctx, stream).Result(); err != nil {
			t.Fatalf("redistest: XLEN %s: %v", stream, err)
		}
		return n >= int64(want)
	}, func() string { return fmt.Sprintf("%d entries in %s, have %d", want, stream, n) })
	msgs, err := c.XRange(ctx, stream, "-", "+").Result()
	if err != nil {
		t.Fatalf("redistest: XRANGE %s: %v", stream, err)
	}
	return msgs
}

// Field returns an entry's field as a string ("" when absent).
func Field(m goredis.XMessage, name string) string {
	s, _ := m.Values[name].(string)
	return s
}

// Server is a redis-server process of the test's own, without persistence
// except the snapshot Stop saves, so that Start brings the data back.
type Server struct {
	bin  string
	dir  string
	port int
	// tlsPort is the TLS listener's port, 0 without TLS.
	tlsPort int
	args    []string
	cmd     *exec.Cmd
	done    chan struct{}
}

// Binary is the redis-server that Start runs: TEST_REDIS_SERVER, or the
// Debian package's.
func Binary() string {
	if b := os.Getenv("TEST_REDIS_SERVER"); b != "" {
		return b
	}
	return "/usr/bin/redis-server"
}

// Start runs a redis-server on a free port until the test ends. args are
// further configuration directives ("--maxmemory", "1mb").
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	bin := Binary()
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("redistest: %s: %v (install redis-server; scripts/services.sh redis does)", bin, err)
	}
	s := &Server{bin: bin, dir: t.TempDir(), port: freePort(t), args: args}
	s.Start(t)
	t.Cleanup(s.kill)
	return s
}

// TLSFiles are the PEM files of a TLS listener.
type TLSFiles struct {
	// Cert and Key are the server's certificate and key.
	Cert, Key string
	// CA verifies client certificates; with it, clients must present one.
	CA string
}

// StartTLS is Start with a TLS listener on a second free port, at TLSAddr.
// The plain port stays open for the test's own connections.
func StartTLS(t testing.TB, files TLSFiles, args ...string) *Server {
	t.Helper()
	tlsPort := freePort(t)
	tlsArgs := []string{"--tls-port", strconv.Itoa(tlsPort), "--tls-cert-file", files.Cert, "--tls-key-file", files.Key}
	if files.CA != "" {
		tlsArgs = append(tlsArgs, "--tls-ca-cert-file", files.CA, "--tls-auth-clients", "yes")
	} else {
		tlsArgs = append(tlsArgs, "--tls-auth-clients", "no")
	}
	s := Start(t, append(tlsArgs, args...)...)
	s.tlsPort = tlsPort
	return s
}

// TLSAddr is the TLS listener's host:port.
func (s *Server) TLSAddr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.tlsPort)) }

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL is the server's redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr() }

// Start starts the server again after Stop, on the same port, with the data
// Stop saved.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	if s.cmd != nil {
		t.Fatal("redistest: Start: the server is running")
	}
	args := append([]string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--logfile", filepath.Join(s.dir, "redis.log"),
	}, s.args...)
	cmd := exec.Command(s.bin, args...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("redistest: start %s: %v", s.bin, err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(s.done)

	c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), MaxRetries: -1, DialerRetries: 1})
	defer func() { _ = c.Close() }()
	var last error
	eventually.True(t, 30*time.Second, func() bool {
		select {
		case <-s.done:
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			t.Fatalf("redistest: redis-server exited at start: %s\n%s", cmd.ProcessState, log)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		last = c.Ping(ctx).Err()
		return last == nil
	}, func() string { return fmt.Sprintf("redis-server on %s to answer PING, last error %v", s.Addr(), last) })
}

// Stop saves a snapshot and shuts the server down, closing every connection,
// and waits for the process to end.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	if s.cmd == nil {
		t.Fatal("redistest: Stop: the server is not running")
	}
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The server closes the connection instead of answering SHUTDOWN.
	if err := c.ShutdownSave(ctx).Err(); err != nil && !isConnGone(err) {
		t.Fatalf("redistest: SHUTDOWN SAVE: %v", err)
	}
	select {
	case <-s.done:
	case <-ctx.Done():
		t.Fatal("redistest: redis-server did not exit within 30s of SHUTDOWN")
	}
	s.cmd = nil
}

func isConnGone(err error) bool {
	var redisErr goredis.Error
	return !errors.As(err, &redisErr)
}

// kill ends the process at the end of the test, whatever state it is in.
func (s *Server) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}
