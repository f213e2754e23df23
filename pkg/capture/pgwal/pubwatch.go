package pgwal

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// pubWatch reads the publication's identity every interval on a
// connection of its own (the replication connection is busy streaming)
// and remembers the first change: the stream ends with it, since the slot
// cannot follow a publication that changed under it. A failed read is no
// change; the stream's own errors cover a lost server.
type pubWatch struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu  sync.Mutex
	err error
}

func startPubWatch(ctx context.Context, connString string, every time.Duration, name, query, opened string, log *slog.Logger) *pubWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &pubWatch{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		var conn *pgconn.PgConn
		defer func() {
			if conn != nil {
				_ = conn.Close(context.Background())
			}
		}()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			var err error
			if conn == nil || conn.IsClosed() {
				if conn, err = connect(ctx, connString, false); err != nil {
					conn = nil
					continue
				}
			}
			results, err := conn.Exec(ctx, query).ReadAll()
			if err != nil {
				if ctx.Err() == nil {
					log.Warn("checking the publication failed; checking again", "error", err)
				}
				continue
			}
			now := ""
			for _, res := range results {
				if len(res.Rows) > 0 && len(res.Rows[0]) > 0 {
					now = string(res.Rows[0][0])
				}
			}
			if now == opened {
				continue
			}
			what := "was dropped, made again or altered, or the table left it"
			if now == "" {
				what = "does not exist"
			}
			w.mu.Lock()
			w.err = fmt.Errorf("publication %s %s (identity %s, now %q): %w", name, what, opened, now, ErrPublicationChanged)
			w.mu.Unlock()
			return
		}
	}()
	return w
}

// changed is the change found, nil while there is none.
func (w *pubWatch) changed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *pubWatch) stop() {
	w.cancel()
	<-w.done
}
