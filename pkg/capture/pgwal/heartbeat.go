package pgwal

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// heartbeat writes a logical message every interval on a connection of its
// own. Its WAL record goes through the slot's stream like any change, so
// the stream reaches further and the reader can acknowledge it while the
// outbox is idle and the rest of the database is not; without it, a
// database whose only writes are elsewhere keeps its slot's WAL.
type heartbeat struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func startHeartbeat(ctx context.Context, connString string, every time.Duration, log *slog.Logger) *heartbeat {
	ctx, cancel := context.WithCancel(ctx)
	h := &heartbeat{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		var conn *pgconn.PgConn
		defer func() {
			if conn != nil {
				_ = conn.Close(context.Background())
			}
		}()
		warned := false
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
				}
			}
			if err == nil {
				_, err = conn.Exec(ctx, "SELECT pg_logical_emit_message(false, '"+HeartbeatPrefix+"', '')").ReadAll()
			}
			switch {
			case err != nil && ctx.Err() == nil && !warned:
				log.Warn("writing the WAL heartbeat failed; an idle outbox on a busy database may keep WAL until events flow", "error", err)
				warned = true
			case err == nil:
				warned = false
			}
		}
	}()
	return h
}

func (h *heartbeat) stop() {
	h.cancel()
	<-h.done
}
