package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/internal/syncbuf"
)

// hungDatabase listens on a port that accepts connections and never answers,
// like a PostgreSQL server that hangs. accepted counts the connections.
func hungDatabase(t *testing.T) (addr string, accepted *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted = &atomic.Int32{}
	var mu sync.Mutex
	var held []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
			accepted.Add(1)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			_ = c.Close()
		}
	})
	return ln.Addr().String(), accepted
}

// TestSIGTERMWhileWaitingForTheDatabaseExits0 stops the relay while it
// waits for a database that never answers: that is a clean stop (exit 0,
// nothing logged as an error), long before the connect timeout.
func TestSIGTERMWhileWaitingForTheDatabaseExits0(t *testing.T) {
	t.Parallel()
	addr, accepted := hungDatabase(t)
	var log syncbuf.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, nil, map[string]string{
			"STORAGE_URL":          "postgres://relay:" + secret + "@" + addr + "/outbox?sslmode=disable",
			"STORAGE_AUTO_MIGRATE": "true",
			"PUBLISHER_URL":        "null://",
			"HTTP_ADDR":            "127.0.0.1:0",
			"LOG_FORMAT":           "text",
		}, io.Discard, &log)
	}()
	eventually.True(t, 30*time.Second, func() bool { return accepted.Load() > 0 },
		func() string { return "the relay to connect to the database; log:\n" + log.String() })

	cancel() // what SIGTERM does
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit code %d after SIGTERM during start-up, want 0; log:\n%s", code, log.String())
		}
	case <-time.After(5 * time.Second): // the connect timeout is 10s
		t.Fatalf("relay did not stop within 5s of SIGTERM during start-up; log:\n%s", log.String())
	}
	out := log.String()
	for _, want := range []string{"connecting to PostgreSQL", "relay stopped before it started"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "level=ERROR") || strings.Contains(out, secret) {
		t.Errorf("log has an error or the password:\n%s", out)
	}
}

// TestHungDatabaseDoesNotHangStart points the relay at a database that
// accepts connections and never answers, with no connect_timeout in
// STORAGE_URL: the default one ends the wait and the relay exits 1 saying
// why, instead of hanging until it is killed.
func TestHungDatabaseDoesNotHangStart(t *testing.T) {
	t.Parallel()
	addr, _ := hungDatabase(t)
	code, _, stderr := runRelay(t, map[string]string{
		"STORAGE_URL":   "postgres://relay:" + secret + "@" + addr + "/outbox?sslmode=disable",
		"PUBLISHER_URL": "null://",
		"HTTP_ADDR":     "127.0.0.1:0",
	})
	if code != 1 {
		t.Fatalf("exit code %d, want 1; stderr:\n%s", code, stderr)
	}
	// runRelay's context ends after 30s; the connect timeout must come first.
	if !strings.Contains(stderr, "cannot reach PostgreSQL at 127.0.0.1") || !strings.Contains(stderr, "timeout") ||
		strings.Contains(stderr, secret) {
		t.Errorf("stderr does not say that connecting timed out, or leaks the password:\n%s", stderr)
	}
}

// TestHealthcheckReadsTheRelaysConfiguration runs `relay healthcheck` with
// the environment of a running relay: SERVER_PORT (Open Outbox) alone, and
// an HTTP_ADDR on another loopback address than 127.0.0.1.
func TestHealthcheckReadsTheRelaysConfiguration(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	healthcheck := func(env map[string]string) (int, string) {
		var stderr bytes.Buffer
		return run(context.Background(), []string{"healthcheck"}, env, io.Discard, &stderr), stderr.String()
	}
	start := func(t *testing.T, env map[string]string, probe string) {
		t.Helper()
		env["STORAGE_URL"], env["PUBLISHER_URL"], env["LOG_FORMAT"] = tb.URL, "null://", "text"
		launch(t, probe, func(ctx context.Context, log io.Writer) int { return run(ctx, nil, env, io.Discard, log) })
		if code, stderr := healthcheck(env); code != 0 {
			t.Errorf("healthcheck with the relay's environment %v: exit %d: %s", env, code, stderr)
		}
	}

	t.Run("SERVER_PORT", func(t *testing.T) {
		t.Parallel()
		_, port, _ := net.SplitHostPort(freeAddr(t))
		start(t, map[string]string{"SERVER_PORT": port}, "127.0.0.1:"+port)
	})
	t.Run("HTTP_ADDR on another loopback address", func(t *testing.T) {
		t.Parallel()
		l, err := net.Listen("tcp", "127.0.0.2:0")
		if err != nil {
			t.Skipf("127.0.0.2 is not usable here: %v", err)
		}
		addr := l.Addr().String()
		_ = l.Close()
		start(t, map[string]string{"HTTP_ADDR": addr}, addr)
	})
	t.Run("invalid configuration", func(t *testing.T) {
		t.Parallel()
		code, stderr := healthcheck(map[string]string{"BATCH_SIZE": "0"})
		if code != 2 || !strings.Contains(stderr, "BATCH_SIZE must be positive") {
			t.Errorf("healthcheck with BATCH_SIZE=0: exit %d, want 2 naming the setting: %s", code, stderr)
		}
	})
}
