package relay

import (
	"context"
	"sync"
	"time"

	"github.com/outbox-relay/relay/pkg/storage"
)

// debouncer turns a stream of insert notifications into wakeups: the first
// one after a quiet spell wakes at once; the ones that follow within the
// debounce time wake once more when that time is up. A burst of inserts
// then makes a few full claims instead of many tiny ones.
type debouncer struct {
	wait time.Duration
	wake func()

	mu      sync.Mutex
	timer   *time.Timer
	pending bool
}

func (d *debouncer) notify() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil {
		d.pending = true
		return
	}
	d.wake()
	if d.wait > 0 {
		d.timer = time.AfterFunc(d.wait, d.end)
	}
}

func (d *debouncer) end() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.pending {
		d.timer = nil
		return
	}
	d.pending = false
	d.wake()
	d.timer.Reset(d.wait)
}

// Notify is called for every notification that events were inserted; see
// NotifyDebounce.
func (e *Engine) Notify() { e.notify.notify() }

// Listen feeds n's notifications to Notify until ctx ends, reconnecting with
// backoff when the connection drops. Meanwhile the engine still polls every
// PollInterval, so a lost listener delays events but loses none.
func (e *Engine) Listen(ctx context.Context, n storage.Notifier) {
	wait := storageBackoffMin
	for ctx.Err() == nil {
		began := time.Now()
		err := n.Listen(ctx, e.Notify)
		if err == nil || ctx.Err() != nil {
			return
		}
		if time.Since(began) > storageBackoffMax {
			wait = storageBackoffMin // it had been working
		}
		e.log.Warn("listening for inserts failed; polling meanwhile", "error", err, "retry_in", wait)
		sleep(ctx, wait)
		wait = min(wait*2, storageBackoffMax)
	}
}
