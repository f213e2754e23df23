package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/internal/pgcluster"
	"github.com/outbox-relay/relay/pkg/storage"
)

// The ordered cases a hostile test found (issue "Every event claimed by
// rule, not by timing"), each on a private, quiet cluster with sweeps off:
// on a busy shared server other commits hide them.

// Case 5: retry-dead sends a key's DEAD first event back with a statement
// that ran for a long while before it wrote (a filter on the error text
// over many DEAD rows), so the row is due from that statement's start;
// the key's next event is written after it commits. The key's floor had
// passed the DEAD event, and the due position, which claims kept moving
// while the statement ran, had passed its moment: the claims took the
// key's third event while its first waited, PENDING and due. A floor
// never passes a DEAD event now, so the claim's walk meets it first.
func TestRetryDeadThatRunsLongKeepsItsKeysOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := pgcluster.Start(t, pgcluster.Options{})
	tb := pgtest.NewAt(t, c.URL(c.CreateDatabase(t)))
	s := tb.Store
	p := storage.ClaimParams{RelayID: "r", Limit: 10, RunLimit: 1, Ordering: storage.OrderingPartition,
		OnDead: storage.DeadSkip, SweepInterval: time.Hour}
	ids := tb.Insert(t, pgtest.Event{Type: "dies", PartitionKey: "k"}, pgtest.Event{Type: "second", PartitionKey: "k"})
	claimAndBury(t, s, p, ids[0])
	if got := claimDelivered(t, s, p); !slices.Equal(got, ids[1:2]) {
		t.Fatalf("claimed %v, want the key's second event (ORDERING_ON_DEAD=skip)", got)
	}
	// The retry-dead statement locks its row, then takes a while before it
	// writes: a trigger stands in for the scan of many DEAD rows.
	tb.Exec(t, `CREATE FUNCTION slow_retry() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_sleep(0.6); RETURN NEW; END $$`)
	tb.Exec(t, `CREATE TRIGGER slow_retry BEFORE UPDATE ON {{table}}
		FOR EACH ROW WHEN (OLD.status = 'DEAD' AND NEW.status = 'PENDING') EXECUTE FUNCTION slow_retry()`)
	retried := make(chan error, 1)
	go func() {
		n, err := s.RetryDead(ctx, storage.RetryDeadParams{})
		if err == nil && n != 1 {
			err = fmt.Errorf("RetryDead retried %d events, want 1", n)
		}
		retried <- err
	}()
	// The relay claims all the while, as it would.
	var took []uuid.UUID
	for waiting := true; waiting; {
		select {
		case err := <-retried:
			if err != nil {
				t.Fatal(err)
			}
			waiting = false
		default:
			took = append(took, claimDelivered(t, s, p)...)
		}
	}
	// A claim after the retry committed and before this loop saw it end
	// may take the retried event: nothing else.
	if len(took) != 0 && !slices.Equal(took, ids[:1]) {
		t.Fatalf("claimed %v while retry-dead ran, want nothing but the retried event %s", took, ids[0])
	}
	third := tb.Insert(t, pgtest.Event{Type: "third", PartitionKey: "k"})[0]
	for len(took) < 2 {
		got := claimDelivered(t, s, p)
		if len(got) == 0 {
			break
		}
		took = append(took, got...)
	}
	if want := []uuid.UUID{ids[0], third}; !slices.Equal(took, want) {
		t.Fatalf("the claims after the retry took %v, want the retried first event %s, then the third %s", took, ids[0], third)
	}
}
