package pgwal

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// startHeartbeat writes a logical message every interval on a connection
// of its own. Its WAL record goes through the slot's stream like any
// change, so the stream reaches further and the reader can acknowledge it
// while the outbox is idle and the rest of the database is not; without
// it, a database whose only writes are elsewhere keeps its slot's WAL.
func startHeartbeat(ctx context.Context, connString string, every time.Duration, log *slog.Logger) *sideLoop {
	return startSideLoop(ctx, connString, every, log,
		"writing the WAL heartbeat failed; an idle outbox on a busy database may keep WAL until events flow",
		func(ctx context.Context, conn *pgconn.PgConn) (bool, error) {
			_, err := conn.Exec(ctx, "SELECT pg_logical_emit_message(false, '"+HeartbeatPrefix+"', '')").ReadAll()
			return false, err
		})
}
