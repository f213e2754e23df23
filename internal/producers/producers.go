// Package producers runs writers that insert without pause, one event per
// transaction, as an application does, and measures the longest insert:
// how long something else on the database (a migration) held them up.
package producers

import (
	"sync"
	"sync/atomic"
	"time"
)

// Run is producers at work.
type Run struct {
	stop     chan struct{}
	wg       sync.WaitGroup
	inserted atomic.Int64
	mu       sync.Mutex
	longest  time.Duration
	errs     []error
}

// Start runs one producer per insert, each calling its insert again and
// again until Halt.
func Start(inserts ...func() error) *Run {
	r := &Run{stop: make(chan struct{})}
	for _, insert := range inserts {
		r.wg.Go(func() {
			for {
				select {
				case <-r.stop:
					return
				default:
				}
				start := time.Now()
				err := insert()
				took := time.Since(start)
				r.mu.Lock()
				r.longest = max(r.longest, took)
				if err != nil {
					r.errs = append(r.errs, err)
				}
				r.mu.Unlock()
				if err == nil {
					r.inserted.Add(1)
				}
			}
		})
	}
	return r
}

// Inserted is how many inserts have succeeded so far.
func (r *Run) Inserted() int64 { return r.inserted.Load() }

// Halt stops the producers and returns how many inserts succeeded, the
// longest insert and every error.
func (r *Run) Halt() (inserted int64, longest time.Duration, errs []error) {
	close(r.stop)
	r.wg.Wait()
	return r.inserted.Load(), r.longest, r.errs
}
