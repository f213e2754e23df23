package nats

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"sync"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// acker receives JetStream's acknowledgements for one connection's
// publishes, on one wildcard subscription. It does what nats.go's
// asynchronous publish does, without that API's per-message future, two
// channels, timer and JSON decoding of every acknowledgement: at tens of
// thousands of events a second those made up a fifth of the relay's CPU.
// A publish's reply subject is <prefix><batch>.<index>.
type acker struct {
	prefix string
	// slots bounds the publishes awaiting an acknowledgement
	// (max_pending): a publish takes a slot, its answer frees it.
	slots chan struct{}

	mu      sync.Mutex
	next    uint64
	batches map[uint64]*ackBatch
}

// ackBatch is one Publish call's publishes awaiting their answers.
type ackBatch struct {
	num      uint64
	replies  string // every reply subject of the batch, end to end
	offsets  []int  // where message i's reply subject starts in replies
	results  []error
	answered []bool
	// held says which publishes hold a slot.
	held []bool
	left int
	done chan struct{}
}

func newAcker(nc *natsgo.Conn, maxPending int) (*acker, error) {
	a := &acker{
		prefix:  nc.NewInbox() + ".",
		slots:   make(chan struct{}, maxPending),
		batches: map[uint64]*ackBatch{},
	}
	// Subscribed while disconnected too: nats.go sends it on (re)connect.
	if _, err := nc.Subscribe(a.prefix+">", a.receive); err != nil {
		return nil, err
	}
	return a, nil
}

// begin registers a batch of n publishes and makes their reply subjects.
func (a *acker) begin(n int) *ackBatch {
	a.mu.Lock()
	a.next++
	num := a.next
	a.mu.Unlock()
	head := a.prefix + strconv.FormatUint(num, 10) + "."
	buf := make([]byte, 0, n*(len(head)+4))
	offsets := make([]int, n+1)
	for i := range n {
		offsets[i] = len(buf)
		buf = append(buf, head...)
		buf = strconv.AppendInt(buf, int64(i), 10)
	}
	offsets[n] = len(buf)
	b := &ackBatch{
		num: num, replies: string(buf), offsets: offsets,
		results: make([]error, n), answered: make([]bool, n), held: make([]bool, n), left: n,
		done: make(chan struct{}),
	}
	if n == 0 {
		close(b.done)
	}
	a.mu.Lock()
	a.batches[num] = b
	a.mu.Unlock()
	return b
}

// reply is the reply subject of the batch's i-th publish.
func (b *ackBatch) reply(i int) string { return b.replies[b.offsets[i]:b.offsets[i+1]] }

// hold marks the batch's i-th publish as holding a slot, taken by the
// caller, before it is sent.
func (a *acker) hold(b *ackBatch, i int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	b.held[i] = true
}

// settle records the answer to the batch's i-th publish, unless it has
// one, and frees its slot.
func (a *acker) settle(b *ackBatch, i int, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if b.answered[i] {
		return
	}
	b.answered[i], b.results[i] = true, err
	if b.held[i] {
		<-a.slots
	}
	if b.left--; b.left == 0 {
		close(b.done)
	}
}

// end forgets the batch, frees the slots of publishes still unanswered and
// returns, for each publish, whether it was answered and with what. An
// answer arriving later is dropped.
func (a *acker) end(b *ackBatch) (answered []bool, results []error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.batches, b.num)
	answered = slices.Clone(b.answered)
	for i := range b.answered {
		if !b.answered[i] && b.held[i] {
			<-a.slots
		}
		b.answered[i] = true // a late settle is a no-op
	}
	return answered, b.results
}

// disconnected answers every publish sent and still unanswered with err:
// an answer cannot cross a connection that went down, so waiting out the
// timeout would only delay the batch's release.
func (a *acker) disconnected(err error) {
	a.mu.Lock()
	batches := make([]*ackBatch, 0, len(a.batches))
	for _, b := range a.batches {
		batches = append(batches, b)
	}
	a.mu.Unlock()
	for _, b := range batches {
		for i := range b.results {
			a.mu.Lock()
			sent := b.held[i]
			a.mu.Unlock()
			if sent {
				a.settle(b, i, err)
			}
		}
	}
}

// receive is the subscription's handler: it finds the publish a reply
// answers and records the result.
func (a *acker) receive(m *natsgo.Msg) {
	rest, ok := strings.CutPrefix(m.Subject, a.prefix)
	if !ok {
		return
	}
	numText, iText, _ := strings.Cut(rest, ".")
	num, err1 := strconv.ParseUint(numText, 10, 64)
	i, err2 := strconv.Atoi(iText)
	if err1 != nil || err2 != nil {
		return
	}
	a.mu.Lock()
	b := a.batches[num]
	a.mu.Unlock()
	if b == nil || i < 0 || i >= len(b.results) {
		return // an answer after its batch gave up waiting
	}
	a.settle(b, i, ackError(m))
}

// errorMember is how a JetStream API answer that refuses starts its error
// member. A stream name cannot hold a quote, so a successful
// acknowledgement never contains it.
var errorMember = []byte(`"error":{`)

// ackError reads JetStream's answer to a publish: nil for an
// acknowledgement (a duplicate included: the stream holds the message), a
// *jetstream.APIError for a refusal, natsgo.ErrNoResponders when no stream
// listens on the subject. Only refusals are decoded as JSON.
func ackError(m *natsgo.Msg) error {
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		return natsgo.ErrNoResponders
	}
	if !bytes.Contains(m.Data, errorMember) {
		return nil
	}
	var answer struct {
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &answer); err != nil || answer.Error == nil {
		return &jetstream.APIError{Code: 500, Description: "unreadable answer from JetStream: " + string(m.Data)}
	}
	return answer.Error
}
