package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// The whole shutdown — the engine's drain, then closing the HTTP server, the
// publisher, the telemetry and the database pool — fits in SHUTDOWN_TIMEOUT
// from the signal, whatever hangs: an orchestrator kills a process that
// overruns its grace period, and a kill loses the releases and the last
// telemetry that a bounded shutdown still gets out.

// closeReserveMax caps the end of SHUTDOWN_TIMEOUT kept for the closing
// steps: each takes milliseconds when what it talks to answers, and one
// that hangs is given up on at the deadline whatever its share.
const closeReserveMax = 2 * time.Second

// closeReserve is the end of timeout kept for the closing steps, a fifth of
// it and at most closeReserveMax; the engine has the rest to drain. A
// timeout that is not positive keeps nothing, so that the engine's
// validation names the value the user set.
func closeReserve(timeout time.Duration) time.Duration {
	return max(0, min(timeout/5, closeReserveMax))
}

// closeSlack is how long before the deadline the closing steps' context
// ends: a step that gives up when told to (the Kafka publisher, waiting for
// writes in flight) then still has time to say why before the last line.
// An engine that stops when its share ends gets as long to return.
func closeSlack(timeout time.Duration) time.Duration {
	return closeReserve(timeout) / 8
}

// shutdown closes what serve opened, within one deadline, and knows the
// relay's last log line.
type shutdown struct {
	log     *slog.Logger
	timeout time.Duration
	// last is the line that ends the log after a clean stop.
	last string
	// steps are added and closed by serve's goroutine only.
	steps []*closeStep

	// mu guards began, which the signal's goroutine may set.
	mu    sync.Mutex
	began time.Time
}

// newShutdown starts the clock when ctx ends (the signal).
func newShutdown(ctx context.Context, timeout time.Duration, log *slog.Logger) *shutdown {
	s := &shutdown{log: log, timeout: timeout, last: "relay stopped"}
	context.AfterFunc(ctx, func() { s.start() })
	return s
}

// start returns when the shutdown began, marking it now if nothing did
// before: the signal, or else the error that ends serve.
func (s *shutdown) start() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.began.IsZero() {
		s.began = time.Now()
	}
	return s.began
}

// deadline is when the relay must have written its last line.
func (s *shutdown) deadline() time.Time {
	return s.start().Add(s.timeout)
}

// engineDeadline is when the closing steps start even if the engine (given
// SHUTDOWN_TIMEOUT less closeReserve) has not returned.
func (s *shutdown) engineDeadline() time.Time {
	return s.deadline().Add(-closeReserve(s.timeout) + closeSlack(s.timeout))
}

// closeStep is one thing to close.
type closeStep struct {
	name  string
	close func(context.Context) error
	// after are the steps that must have finished before this one starts:
	// the pool closes once nothing is left that might still query it.
	after []*closeStep
	done  chan struct{}
	err   error
}

// add registers a step, named for the logs ("the publisher").
func (s *shutdown) add(name string, close func(context.Context) error) *closeStep {
	st := &closeStep{name: name, close: close, done: make(chan struct{})}
	s.steps = append(s.steps, st)
	return st
}

// runsAfter makes st wait for others before it starts.
func (st *closeStep) runsAfter(others ...*closeStep) {
	st.after = append(st.after, others...)
}

func (st *closeStep) run(ctx context.Context) {
	defer close(st.done)
	for _, o := range st.after {
		select {
		case <-o.done:
		case <-ctx.Done():
			st.err = fmt.Errorf("not started: waiting for %s: %w", o.name, ctx.Err())
			return
		}
	}
	st.err = st.close(ctx)
}

// close runs every step at once, except where one waits for another, and
// returns by the deadline, having logged each failure and each step that
// had not finished by then. A step still running is left behind: the
// process is about to exit, and the server on the other end drops the
// connection when it does.
func (s *shutdown) close() {
	deadline := s.deadline()
	ctx, cancel := context.WithDeadline(context.Background(), deadline.Add(-closeSlack(s.timeout)))
	defer cancel()
	for _, st := range s.steps {
		go st.run(ctx)
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	expired := false
	for _, st := range s.steps {
		if !expired {
			select {
			case <-st.done:
			case <-timer.C:
				expired = true
			}
		}
		select {
		case <-st.done:
			if st.err != nil {
				s.log.Warn("closing "+st.name+" failed", "error", st.err)
			}
		default:
			s.log.Warn("closing "+st.name+" did not finish within SHUTDOWN_TIMEOUT; leaving it behind",
				"timeout", s.timeout)
		}
	}
}

// lastLineKey marks, in a record's context, the line that ends the log.
type lastLineKey struct{}

// asLastLine makes the record logged with the returned context the last one
// the relay writes.
func asLastLine(ctx context.Context) context.Context {
	return context.WithValue(ctx, lastLineKey{}, true)
}

// finalHandler writes nothing after the last line. A step left behind at
// the deadline may still be running when the process exits right after
// that line; what it would say is dropped rather than written after the
// line that tells the operator the relay stopped, and the shutdown has
// already said which steps were left behind.
type finalHandler struct {
	slog.Handler
	gate *logGate
}

type logGate struct {
	// mu is held for reading by every write and for writing by the last
	// one, so no write can land after it.
	mu     sync.RWMutex
	closed bool
}

func withLastLine(h slog.Handler) slog.Handler {
	return finalHandler{Handler: h, gate: &logGate{}}
}

func (h finalHandler) Handle(ctx context.Context, r slog.Record) error {
	if ctx.Value(lastLineKey{}) != nil {
		h.gate.mu.Lock()
		defer h.gate.mu.Unlock()
		if h.gate.closed {
			return nil
		}
		h.gate.closed = true
		return h.Handler.Handle(ctx, r)
	}
	h.gate.mu.RLock()
	defer h.gate.mu.RUnlock()
	if h.gate.closed {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h finalHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return finalHandler{Handler: h.Handler.WithAttrs(attrs), gate: h.gate}
}

func (h finalHandler) WithGroup(name string) slog.Handler {
	return finalHandler{Handler: h.Handler.WithGroup(name), gate: h.gate}
}
