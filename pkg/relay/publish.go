package relay

import (
	"context"
	"errors"
	"fmt"

	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/publisher"
	"github.com/outbox-relay/relay/pkg/storage"
)

// publishBatch sends a claimed batch and returns one result per event. When
// the broker dropped the connection while the batch was at it, the dropped
// events are sent again, in halves if need be, until the one the broker
// cannot stand is found (isolate).
func (e *Engine) publishBatch(ctx context.Context, events []outbox.Event) []error {
	results := e.send(ctx, events)
	if ctx.Err() != nil || !anyDropped(results) {
		return results
	}
	// One isolation at a time, and no claims meanwhile: other batches'
	// sends would be dropped with the culprit's and blur the picture.
	e.isolation.Lock()
	defer e.isolation.Unlock()
	e.isolate(ctx, events, results, redo(results, allIndexes(len(events))))
	return results
}

// send publishes events in one go: in key order under partition ordering.
func (e *Engine) send(ctx context.Context, events []outbox.Event) []error {
	if e.cfg.Ordering == storage.OrderingPartition {
		return e.publishInKeyOrder(ctx, events)
	}
	return e.publish(ctx, events)
}

// isolate sends the events at idx again, as long as the broker answers a
// check: all together first, then, while sends keep being dropped, each half
// on its own, until the event that makes the broker drop the connection
// stands alone. That event is charged with a failed attempt; the others are
// delivered. A broker that no longer answers ends the search: what is left
// is released, as for any outage. results is updated in place.
func (e *Engine) isolate(ctx context.Context, events []outbox.Event, results []error, idx []int) {
	idx = e.sendable(events, results, idx)
	if len(idx) == 0 || ctx.Err() != nil {
		return
	}
	if err := e.broker.check(ctx); err != nil {
		return
	}
	sub := make([]outbox.Event, len(idx))
	for j, i := range idx {
		sub[j] = events[i]
	}
	for j, err := range e.send(ctx, sub) {
		results[idx[j]] = err
	}
	again := redo(results, idx)
	switch {
	case len(again) == 0 || ctx.Err() != nil:
	case len(again) == 1:
		i := again[0]
		if !publisher.IsDropped(results[i]) {
			return // held back behind an event that is no longer dropped
		}
		e.log.Warn("the broker drops its connection whenever this event is sent; counting a failed attempt",
			"event_id", events[i].ID, "event_type", publisher.Clip(events[i].Type), "error", results[i])
		// Not Unavailable any more: the event, not the broker, is at fault.
		results[i] = fmt.Errorf("the broker closed the connection each time this event was sent, also alone, while it answered otherwise: %s", results[i])
	default:
		half := len(again) / 2
		e.isolate(ctx, events, results, again[:half])
		e.isolate(ctx, events, results, again[half:])
	}
}

// sendable keeps the events at idx that may be sent now. Under partition
// ordering an event goes only if every earlier event of its key in the
// batch was delivered or goes in the same send (which keeps their order);
// the others are held back.
func (e *Engine) sendable(events []outbox.Event, results []error, idx []int) []int {
	if e.cfg.Ordering != storage.OrderingPartition {
		return idx
	}
	in := make(map[int]bool, len(idx))
	for _, i := range idx {
		in[i] = true
	}
	blocked := map[string]bool{}
	out := make([]int, 0, len(idx))
	for i := range events {
		k := events[i].PartitionKey
		switch {
		case in[i] && (k == "" || !blocked[k]):
			out = append(out, i)
		case in[i]:
			results[i] = errKeyBlocked
		case k != "" && results[i] != nil:
			blocked[k] = true
		}
	}
	return out
}

// redo returns the events among idx to send again: dropped, or held back
// behind one.
func redo(results []error, idx []int) []int {
	var out []int
	for _, i := range idx {
		if publisher.IsDropped(results[i]) || errors.Is(results[i], errKeyBlocked) {
			out = append(out, i)
		}
	}
	return out
}

func anyDropped(results []error) bool {
	for _, err := range results {
		if publisher.IsDropped(err) {
			return true
		}
	}
	return false
}

func allIndexes(n int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// errNoType is the fate of an event without an event_type: every broker
// routes by it, and some would take an empty one silently (a Kafka topic
// prefix alone, RabbitMQ's empty routing key).
var errNoType = publisher.Permanent(errors.New("event_type is empty: nothing to route the event by"))

// publish sends events in one call and checks the driver kept its contract.
// Events without a type never reach the driver.
func (e *Engine) publish(ctx context.Context, events []outbox.Event) []error {
	send, idx := events, []int(nil)
	for i := range events {
		if events[i].Type == "" {
			send, idx = routable(events)
			break
		}
	}
	sent := e.pub.Publish(ctx, send)
	if len(sent) != len(send) {
		// A driver bug must not lose events: release the lot.
		err := fmt.Errorf("publisher returned %d results for %d events", len(sent), len(send))
		e.log.Error("publisher broke its contract; releasing batch", "error", err)
		sent = publisher.Fill(len(send), publisher.Unavailable(err))
	}
	if idx == nil {
		return sent
	}
	results := publisher.Fill(len(events), errNoType)
	for j, i := range idx {
		results[i] = sent[j]
	}
	return results
}

// routable returns the events that have a type and their positions.
func routable(events []outbox.Event) ([]outbox.Event, []int) {
	var send []outbox.Event
	idx := []int{}
	for i := range events {
		if events[i].Type != "" {
			send = append(send, events[i])
			idx = append(idx, i)
		}
	}
	return send, idx
}

// errKeyBlocked marks an event that was not sent because an earlier event
// with its key was not delivered; it is released untouched.
var errKeyBlocked = errors.New("blocked behind an undelivered event with the same partition key")

// publishInKeyOrder sends a batch so that no event leaves before the
// earlier events of its key are acknowledged: round r sends the r-th event
// of every key (and, in the first round, every event without a key), all
// pipelined in one call. A key whose event fails sends nothing more; the
// rest of its run is held back for a later claim.
func (e *Engine) publishInKeyOrder(ctx context.Context, events []outbox.Event) []error {
	results := make([]error, len(events))
	var unkeyed []int
	runs := map[string][]int{}
	var keys []string
	for i, ev := range events {
		if ev.PartitionKey == "" {
			unkeyed = append(unkeyed, i)
			continue
		}
		if _, seen := runs[ev.PartitionKey]; !seen {
			keys = append(keys, ev.PartitionKey)
		}
		runs[ev.PartitionKey] = append(runs[ev.PartitionKey], i)
		results[i] = errKeyBlocked
	}
	stopped := map[string]bool{}
	for round := 0; ; round++ {
		var idx []int
		if round == 0 {
			idx = append(idx, unkeyed...)
		}
		for _, k := range keys {
			if run := runs[k]; round < len(run) && !stopped[k] {
				idx = append(idx, run[round])
			}
		}
		if len(idx) == 0 {
			return results
		}
		sub := make([]outbox.Event, len(idx))
		for j, i := range idx {
			sub[j] = events[i]
		}
		for j, err := range e.publish(ctx, sub) {
			i := idx[j]
			results[i] = err
			if err != nil && events[i].PartitionKey != "" {
				stopped[events[i].PartitionKey] = true
			}
		}
	}
}

// publishUntilTaken publishes events and, while the broker is unavailable,
// waits for it and sends what it did not take again (a source that
// waitsOutOutages: the log's events are not handed back to the table for
// an outage, and nothing after them is acknowledged meanwhile).
func (e *Engine) publishUntilTaken(ctx context.Context, events []outbox.Event) []error {
	results := e.publishBatch(ctx, events)
	for ctx.Err() == nil && anyUnavailable(results) {
		e.broker.close(firstUnavailable(results))
		e.broker.wait(ctx)
		idx := make([]int, 0, len(events))
		for i, err := range results {
			if err != nil && (publisher.IsUnavailable(err) || errors.Is(err, errKeyBlocked)) {
				idx = append(idx, i)
			}
		}
		again := make([]outbox.Event, len(idx))
		for j, i := range idx {
			again[j] = events[i]
		}
		for j, err := range e.publishBatch(ctx, again) {
			results[idx[j]] = err
		}
	}
	return results
}

func anyUnavailable(results []error) bool { return firstUnavailable(results) != nil }

func firstUnavailable(results []error) error {
	for _, err := range results {
		if err != nil && publisher.IsUnavailable(err) {
			return err
		}
	}
	return nil
}
