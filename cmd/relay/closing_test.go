package main

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/syncbuf"
)

// TestClosingEndsByTheDeadlineAndTheLastLineStaysLast: a step that ignores
// its context is left behind at the deadline, a step that gives up when told
// to says why before it, a step waiting for the hung one never starts, and
// nothing the hung step says afterwards reaches the log.
func TestClosingEndsByTheDeadlineAndTheLastLineStaysLast(t *testing.T) {
	t.Parallel()
	var buf syncbuf.Buffer
	log := slog.New(withLastLine(slog.NewTextHandler(&buf, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	// Long enough that the polite step's context ends (closeSlack) well before
	// the deadline on a loaded machine.
	const timeout = 2 * time.Second
	sd := newShutdown(ctx, timeout, log)

	release := make(chan struct{})
	hungReturned := make(chan struct{})
	hung := sd.add("the hung thing", func(context.Context) error {
		<-release
		log.Warn("the hung thing speaks after the end")
		close(hungReturned)
		return nil
	})
	sd.add("the polite thing", func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	})
	var started atomic.Bool
	sd.add("the dependent thing", func(context.Context) error { started.Store(true); return nil }).runsAfter(hung)

	cancel()
	began := sd.start()
	sd.close()
	if took := time.Since(began); took > timeout+500*time.Millisecond {
		t.Errorf("closing took %s with a %s timeout", took, timeout)
	}
	log.InfoContext(asLastLine(context.Background()), "relay stopped")
	close(release)
	<-hungReturned

	out := buf.String()
	for _, want := range []string{
		`msg="closing the polite thing failed" error="context deadline exceeded"`,
		`msg="closing the hung thing did not finish within SHUTDOWN_TIMEOUT; leaving it behind"`,
		`msg="closing the dependent thing failed" error="not started: waiting for the hung thing: context deadline exceeded"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %s:\n%s", want, out)
		}
	}
	if started.Load() {
		t.Error("a step started before the step it waits for finished")
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if last := lines[len(lines)-1]; !strings.Contains(last, `msg="relay stopped"`) {
		t.Errorf("last line %q, want relay stopped; log:\n%s", last, out)
	}
	if strings.Contains(out, "after the end") {
		t.Errorf("a step left behind wrote after the last line:\n%s", out)
	}
}
