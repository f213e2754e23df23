package pgwal

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// sideLoop runs a step every interval on an ordinary connection of its
// own (the replication connection is busy streaming), made again whenever
// it is closed: the heartbeat and the publication watch. A failure, to
// connect or of the step, is logged once until a step succeeds again;
// the next tick tries again.
type sideLoop struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// startSideLoop runs step every interval until ctx ends or step says it is
// done. failed is the log message for a failure.
func startSideLoop(ctx context.Context, connString string, every time.Duration, log *slog.Logger, failed string,
	step func(ctx context.Context, conn *pgconn.PgConn) (done bool, err error)) *sideLoop {
	ctx, cancel := context.WithCancel(ctx)
	l := &sideLoop{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
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
			var (
				err  error
				done bool
			)
			if conn == nil || conn.IsClosed() {
				if conn, err = connect(ctx, connString, false); err != nil {
					conn = nil
				}
			}
			if err == nil {
				done, err = step(ctx, conn)
			}
			switch {
			case done:
				return
			case err != nil && ctx.Err() == nil && !warned:
				log.Warn(failed, "error", err)
				warned = true
			case err == nil:
				warned = false
			}
		}
	}()
	return l
}

func (l *sideLoop) stop() {
	l.cancel()
	<-l.done
}
