package main

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/harness/pgtest"
)

// A command interrupted while it waits on the database exits as a shell
// reports a process the signal ended — 130 for Ctrl-C, 143 for SIGTERM —
// and says it was interrupted, so that a script tells it from a failure.
// (It exited 1, as for an unreachable server.)
func TestAnInterruptedCommandExitsAsTheSignalSays(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		sig  os.Signal
		want int
	}{{os.Interrupt, 130}, {syscall.SIGTERM, 143}} {
		t.Run(c.sig.String(), func(t *testing.T) {
			t.Parallel()
			tb := pgtest.New(t)
			tx, err := tb.Pool().Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			if _, err := tx.Exec(ctx, "LOCK TABLE "+tb.Name+" IN ACCESS EXCLUSIVE MODE"); err != nil {
				t.Fatal(err)
			}
			var holder int
			if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&holder); err != nil {
				t.Fatal(err)
			}
			x, cancel := cmd{args: onTable(tb, "list")}.start(t)
			defer cancel()
			var stderr strings.Builder
			x.Stderr = &stderr
			if err := x.Start(); err != nil {
				t.Fatal(err)
			}
			// Until its query waits for the lock.
			deadline := time.Now().Add(30 * time.Second)
			for {
				var waiting bool
				if err := tb.Pool().QueryRow(ctx, "SELECT count(*) > 0 FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid))", holder).Scan(&waiting); err != nil {
					t.Fatal(err)
				}
				if waiting {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("relay-cli list never waited for the table's lock; stderr:\n%s", stderr.String())
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err := x.Process.Signal(c.sig); err != nil {
				t.Fatal(err)
			}
			if code := exitCode(t, x.Wait()); code != c.want {
				t.Fatalf("interrupted by %s: exit %d, want %d; stderr:\n%s", c.sig, code, c.want, stderr.String())
			}
			if strings.Contains(stderr.String(), "cannot reach") {
				t.Errorf("an interrupt reads as an unreachable server:\n%s", stderr.String())
			}
		})
	}
}

func TestInterruptedCodeKeepsCleanEndsAndUsageErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		code int
		sig  os.Signal
		want int
	}{{exitFailure, os.Interrupt, 130}, {exitFailure, syscall.SIGTERM, 143}, {exitOK, os.Interrupt, 0},
		{exitUsage, os.Interrupt, 2}, {exitFailure, nil, 1}} {
		if got := interruptedCode(c.code, c.sig); got != c.want {
			t.Errorf("interruptedCode(%d, %v) = %d, want %d", c.code, c.sig, got, c.want)
		}
	}
}
