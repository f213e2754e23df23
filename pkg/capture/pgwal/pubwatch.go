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
// connection of its own and remembers the first change: the stream ends
// with it, since the slot cannot follow a publication that changed under
// it. A failed read is no change; the stream's own errors cover a lost
// server.
type pubWatch struct {
	*sideLoop

	mu  sync.Mutex
	err error
}

func startPubWatch(ctx context.Context, connString string, every time.Duration, name, query, opened string, log *slog.Logger) *pubWatch {
	w := &pubWatch{}
	w.sideLoop = startSideLoop(ctx, connString, every, log, "checking the publication failed; checking again",
		func(ctx context.Context, conn *pgconn.PgConn) (bool, error) {
			results, err := conn.Exec(ctx, query).ReadAll()
			if err != nil {
				return false, err
			}
			now := ""
			for _, res := range results {
				if len(res.Rows) > 0 && len(res.Rows[0]) > 0 {
					now = string(res.Rows[0][0])
				}
			}
			if now == opened {
				return false, nil
			}
			what := "was dropped, made again or altered, or the table left it"
			if now == "" {
				what = "does not exist"
			}
			w.mu.Lock()
			w.err = fmt.Errorf("publication %s %s (identity %s, now %q): %w", name, what, opened, now, ErrPublicationChanged)
			w.mu.Unlock()
			return true, nil
		})
	return w
}

// changed is the change found, nil while there is none.
func (w *pubWatch) changed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}
