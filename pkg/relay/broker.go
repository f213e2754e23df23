package relay

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/outbox-relay/relay/pkg/publisher"
)

// Broker backoff: how long claiming pauses after the broker was unavailable.
const (
	brokerBackoffMin = time.Second
	brokerBackoffMax = 30 * time.Second
	// brokerCheckTimeout bounds one Ping: long enough for a client to
	// reconnect after the server dropped its connection.
	brokerCheckTimeout = 5 * time.Second
)

// brokerGate is the broker's side of the engine's state: open while the
// broker takes events, closed (claims paused, state paused) from the moment
// it is found unavailable until a Ping succeeds again. The pause between
// checks doubles with each failed check, from 1 s up to 30 s, and starts
// over after a batch is delivered.
type brokerGate struct {
	pub publisher.Publisher
	log *slog.Logger
	// setDown reports the gate's state to the engine's health.
	setDown func(bool)

	mu      sync.Mutex
	down    bool
	backoff time.Duration
}

func newBrokerGate(pub publisher.Publisher, log *slog.Logger, setDown func(bool)) *brokerGate {
	return &brokerGate{pub: pub, log: log, setDown: setDown, backoff: brokerBackoffMin}
}

func (g *brokerGate) isDown() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.down
}

// brokerCheckEvery is how often check asks again within its time.
const brokerCheckEvery = 200 * time.Millisecond

// check asks the broker whether it answers, for up to brokerCheckTimeout:
// right after the broker dropped a connection, a driver may need a moment
// to open a new one.
func (g *brokerGate) check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, brokerCheckTimeout)
	defer cancel()
	for {
		err := g.pub.Ping(ctx)
		if err == nil || ctx.Err() != nil {
			return err
		}
		sleep(ctx, brokerCheckEvery)
		if ctx.Err() != nil {
			return err
		}
	}
}

// close pauses claiming until wait sees the broker answer again.
func (g *brokerGate) close(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.down {
		g.log.Warn("broker unavailable; pausing claims until it answers", "error", err)
	}
	g.down = true
	g.setDown(true)
}

// worked resets the backoff after a delivery.
func (g *brokerGate) worked() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.backoff = brokerBackoffMin
}

// wait sleeps out the current backoff, then asks the broker whether it is
// back; the gate opens only when it answers.
func (g *brokerGate) wait(ctx context.Context) {
	g.mu.Lock()
	wait := g.backoff
	g.backoff = min(g.backoff*2, brokerBackoffMax)
	g.mu.Unlock()

	sleep(ctx, wait)
	if ctx.Err() != nil {
		return
	}
	if err := g.check(ctx); err != nil {
		if ctx.Err() == nil {
			g.log.Warn("broker still unavailable", "error", err, "next_check_in", min(wait*2, brokerBackoffMax))
		}
		return
	}
	g.mu.Lock()
	g.down = false
	// Under the lock, so that a batch failing at this moment cannot have
	// its "down" overwritten.
	g.setDown(false)
	g.mu.Unlock()
	g.log.Info("broker available again; resuming")
}
