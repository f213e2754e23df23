package relay_test

import (
	"context"
	"database/sql"
	"flag"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outbox-relay/relay/internal/harness/mysqltest"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/pkg/outbox"
	"github.com/outbox-relay/relay/pkg/storage"
)

// The database the benchmarks drain: `make bench STORAGE=mysql` passes
// -storage mysql.
var benchStorage = flag.String("storage", "postgres", "storage the benchmarks use: postgres or mysql (MariaDB)")

// benchIDs says who gives each event of a drain's backlog its event_id:
// the producer helper (UUIDv7s, in write order) or the column's default,
// as an application's own INSERT that names no event_id gets.
var benchIDs = flag.String("ids", "writer", "event_id of a drain's backlog (PostgreSQL): writer (the producer helper's) or default (the table's)")

// benchTable is a test table of the storage -storage names, with what the
// benchmarks do to it in that database's SQL.
type benchTable struct {
	store storage.Storage
	// fill empties the table, writes n 200-byte events of eventType
	// spread over keys partition keys (0: no key) and refreshes the
	// optimizer's statistics.
	fill func(b *testing.B, n int, eventType string, keys int)
	// insertOne writes one event in a statement of its own, as an
	// application's transaction would.
	insertOne func(b *testing.B, eventType string)
	settled   func(b *testing.B) bool
	delivered func(b *testing.B) int
	// rows counts every row, whatever its status.
	rows func(b *testing.B) int
	// bytes is the table's size with its indexes and TOAST, where the
	// database reports it exactly (PostgreSQL); nil elsewhere.
	bytes func(b *testing.B) int64
	// walAt is the server's write-ahead log position in bytes, where the
	// database reports it (PostgreSQL); nil elsewhere. It counts every
	// session's writes: compare runs made with nothing else running.
	walAt func(b *testing.B) int64
	// loop is the ceiling: a bare SQL loop that claims up to batch rows
	// and marks them delivered until none is left.
	loop func(b *testing.B, batch int) int
	// heldLoop is the ceiling of held claims (PostgreSQL): a bare SQL loop
	// that locks up to batch PENDING rows in write order with FOR UPDATE
	// SKIP LOCKED, marks them DELIVERED by their address and commits, until
	// none is left; it returns how many it delivered. Nil where the
	// storage has no held claims.
	heldLoop func(b *testing.B, batch int) int
	// add writes n more 200-byte events, as producers would: no
	// truncation, no vacuum, no fresh statistics.
	add func(b *testing.B, n int, eventType string)
	// addApp is add as an application that sets created_at itself, from
	// a clock a second behind the database's: every event lands in the
	// due index (PostgreSQL; nil on MySQL).
	addApp func(b *testing.B, n int, eventType string)
	// addKeyed is add with each event given one of keys partition keys in
	// turn, as producers writing keyed events do.
	addKeyed func(b *testing.B, n int, eventType string, keys int)
	// analyze refreshes the optimizer's statistics.
	analyze func(b *testing.B)
	// hold opens a transaction on a connection of its own that keeps a
	// snapshot (and so vacuum or purge) back until release is called: an
	// analytics query, or a session left idle in transaction.
	hold func(b *testing.B) (release func())
	// fillOneWriter empties the table and writes n 200-byte events in one
	// statement, one writer, as a bulk transaction does (PostgreSQL; nil
	// on MySQL).
	fillOneWriter func(b *testing.B, n int, eventType string)
	// killHeld ends with pg_terminate_backend one session of this table's
	// held claims that is in its transaction, holding row locks (idle
	// there while its batch is at the broker, or settling), and says
	// whether it found one (PostgreSQL; nil on MySQL).
	killHeld func(b *testing.B) bool
}

func newBenchTable(b *testing.B) benchTable {
	b.Helper()
	switch *benchStorage {
	case "postgres":
		return pgBenchTable(b)
	case "mysql":
		return mysqlBenchTable(b)
	}
	b.Fatalf("-storage %q: want postgres or mysql", *benchStorage)
	return benchTable{}
}

func pgBenchTable(b *testing.B) benchTable {
	tb := pgtest.New(b)
	return benchTable{
		store: tb.Store,
		fill: func(b *testing.B, n int, eventType string, keys int) {
			tb.Exec(b, "TRUNCATE {{table}}")
			if *benchIDs == "default" {
				inChunks(n, func(k int) {
					tb.Exec(b, "INSERT INTO {{table}} (event_type, payload) SELECT $1, $2 FROM generate_series(1, $3)",
						eventType, pgtest.Payload(0, 200), k)
				})
			} else {
				tb.InsertN(b, n, eventType)
			}
			if keys > 0 {
				tb.Exec(b, "UPDATE {{table}} SET partition_key = 'key-' || (seq % $1)", keys)
			}
			tb.Exec(b, "VACUUM ANALYZE {{table}}")
		},
		insertOne: func(b *testing.B, eventType string) {
			tb.Exec(b, "INSERT INTO {{table}} (event_type, payload) VALUES ($1, $2)", eventType, pgtest.Payload(0, 200))
		},
		fillOneWriter: func(b *testing.B, n int, eventType string) {
			tb.Exec(b, "TRUNCATE {{table}}")
			tb.Exec(b, "INSERT INTO {{table}} (event_type, payload) SELECT $1, $2 FROM generate_series(1, $3)",
				eventType, pgtest.Payload(0, 200), n)
			tb.Exec(b, "VACUUM ANALYZE {{table}}")
		},
		killHeld: func(b *testing.B) bool {
			// Only sessions whose last statement names this table's
			// schema (as the table's name is quoted there or not): other
			// sessions of the shared server are someone else's.
			var killed bool
			err := tb.Pool().QueryRow(context.Background(), `SELECT coalesce(bool_or(pg_terminate_backend(pid)), false)
				FROM (SELECT pid FROM pg_stat_activity
				      WHERE datname = current_database() AND pid <> pg_backend_pid()
				        AND (state = 'idle in transaction' OR state = 'active' AND backend_xid IS NOT NULL)
				        AND xact_start IS NOT NULL AND strpos(query, $1) > 0
				      ORDER BY state = 'idle in transaction' DESC
				      LIMIT 1) AS s`, strings.Split(tb.Name, ".")[0]).Scan(&killed)
			if err != nil {
				b.Fatal(err)
			}
			return killed
		},
		settled:   func(b *testing.B) bool { return tb.Settled(b) },
		delivered: func(b *testing.B) int { return tb.Counts(b)[outbox.StatusDelivered] },
		rows:      func(b *testing.B) int { return total(tb.Counts(b)) },
		add: func(b *testing.B, n int, eventType string) {
			inChunks(n, func(k int) { tb.InsertN(b, k, eventType) })
		},
		addApp: func(b *testing.B, n int, eventType string) {
			inChunks(n, func(k int) {
				tb.Exec(b, "INSERT INTO {{table}} (event_type, payload, created_at) "+
					"SELECT $1, $2, now() - interval '1 second' FROM generate_series(1, $3)", eventType, pgtest.Payload(0, 200), k)
			})
		},
		addKeyed: func(b *testing.B, n int, eventType string, keys int) {
			inChunks(n, func(k int) {
				events := make([]pgtest.Event, k)
				for i := range events {
					events[i] = pgtest.Event{Type: eventType, PartitionKey: benchKey(i, keys), Payload: pgtest.Payload(i, 200)}
				}
				tb.Insert(b, events...)
			})
		},
		analyze: func(b *testing.B) { tb.Exec(b, "ANALYZE {{table}}") },
		hold: func(b *testing.B) func() {
			ctx := context.Background()
			conn, err := pgx.Connect(ctx, pgtest.URL())
			if err != nil {
				b.Fatal(err)
			}
			if _, err := conn.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ"); err != nil {
				b.Fatal(err)
			}
			// The snapshot is taken by the first query, not by BEGIN.
			if _, err := conn.Exec(ctx, "SELECT count(*) FROM pg_class"); err != nil {
				b.Fatal(err)
			}
			return func() { _ = conn.Close(ctx) }
		},
		walAt: func(b *testing.B) int64 {
			var n int64
			if err := tb.Pool().QueryRow(context.Background(), "SELECT (pg_current_wal_insert_lsn() - '0/0')::bigint").Scan(&n); err != nil {
				b.Fatal(err)
			}
			return n
		},
		bytes: func(b *testing.B) int64 {
			var n int64
			if err := tb.Pool().QueryRow(context.Background(), "SELECT pg_total_relation_size($1::regclass)", tb.Name).Scan(&n); err != nil {
				b.Fatal(err)
			}
			return n
		},
		heldLoop: func(b *testing.B, batch int) int {
			ctx := context.Background()
			delivered := 0
			for {
				var n int64
				err := pgx.BeginFunc(ctx, tb.Pool(), func(tx pgx.Tx) error {
					rows, err := tx.Query(ctx, strings.ReplaceAll(`SELECT ctid FROM {{table}}
						WHERE status = 'PENDING' AND available_at <= now()
						ORDER BY seq LIMIT $1 FOR UPDATE SKIP LOCKED`, "{{table}}", tb.Name), batch)
					if err != nil {
						return err
					}
					addrs, err := pgx.CollectRows(rows, pgx.RowTo[pgtype.TID])
					if err != nil || len(addrs) == 0 {
						return err
					}
					tag, err := tx.Exec(ctx, strings.ReplaceAll(`UPDATE {{table}} SET status = 'DELIVERED',
						delivered_at = now(), updated_at = now() WHERE ctid = ANY($1::tid[])`, "{{table}}", tb.Name), addrs)
					n = tag.RowsAffected()
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
				if n == 0 {
					return delivered
				}
				delivered += int(n)
			}
		},
		loop: func(b *testing.B, batch int) int {
			ctx := context.Background()
			claimed := 0
			for {
				var ids []any
				err := pgx.BeginFunc(ctx, tb.Pool(), func(tx pgx.Tx) error {
					rows, err := tx.Query(ctx, strings.ReplaceAll(`UPDATE {{table}} SET status = 'DELIVERING', locked_by = 'loop',
						locked_at = now(), updated_at = now()
						WHERE event_id IN (SELECT event_id FROM {{table}} WHERE status = 'PENDING' AND available_at <= now()
						ORDER BY seq LIMIT $1 FOR UPDATE SKIP LOCKED)
						RETURNING event_id`, "{{table}}", tb.Name), batch)
					if err != nil {
						return err
					}
					ids, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (any, error) {
						var id [16]byte
						return id, r.Scan(&id)
					})
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
				if len(ids) == 0 {
					return claimed
				}
				claimed += len(ids)
				tb.Exec(b, `UPDATE {{table}} SET status = 'DELIVERED', delivered_at = now(), updated_at = now(),
					locked_by = NULL, locked_at = NULL WHERE event_id = ANY($1::uuid[]) AND status = 'DELIVERING'`, ids)
			}
		},
	}
}

func mysqlBenchTable(b *testing.B) benchTable {
	tb := mysqltest.New(b)
	return benchTable{
		store: tb.Store,
		fill: func(b *testing.B, n int, eventType string, keys int) {
			tb.Exec(b, "TRUNCATE TABLE {{table}}")
			inChunks(n, func(k int) { tb.InsertN(b, k, eventType) })
			if keys > 0 {
				tb.Exec(b, "UPDATE {{table}} SET partition_key = CONCAT('key-', seq % ?)", keys)
			}
			tb.Exec(b, "ANALYZE TABLE {{table}}")
		},
		insertOne: func(b *testing.B, eventType string) {
			tb.Exec(b, "INSERT INTO {{table}} (event_type, payload) VALUES (?, ?)", eventType, mysqltest.Payload(0, 200))
		},
		settled:   func(b *testing.B) bool { return tb.Settled(b) },
		delivered: func(b *testing.B) int { return tb.Counts(b)[outbox.StatusDelivered] },
		rows:      func(b *testing.B) int { return total(tb.Counts(b)) },
		add: func(b *testing.B, n int, eventType string) {
			inChunks(n, func(k int) { tb.InsertN(b, k, eventType) })
		},
		addKeyed: func(b *testing.B, n int, eventType string, keys int) {
			inChunks(n, func(k int) {
				events := make([]mysqltest.Event, k)
				for i := range events {
					events[i] = mysqltest.Event{Type: eventType, PartitionKey: benchKey(i, keys), Payload: mysqltest.Payload(i, 200)}
				}
				tb.Insert(b, events...)
			})
		},
		analyze: func(b *testing.B) { tb.Exec(b, "ANALYZE TABLE {{table}}") },
		hold: func(b *testing.B) func() {
			ctx := context.Background()
			conn, err := tb.Store.DB().Conn(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := conn.ExecContext(ctx, "START TRANSACTION WITH CONSISTENT SNAPSHOT"); err != nil {
				b.Fatal(err)
			}
			return func() {
				_, _ = conn.ExecContext(ctx, "ROLLBACK")
				_ = conn.Close()
			}
		},
		loop: func(b *testing.B, batch int) int {
			ctx := context.Background()
			db := tb.Store.DB() // READ COMMITTED, as the driver's sessions
			claimed := 0
			for {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					b.Fatal(err)
				}
				rows, err := tx.QueryContext(ctx, "SELECT event_id FROM "+tb.Name+` FORCE INDEX (openoutbox_events_state_seq_idx)
					WHERE status = 'PENDING' AND state_at <= UTC_TIMESTAMP(6)
					ORDER BY state_at, seq LIMIT ? FOR UPDATE SKIP LOCKED`, batch)
				if err != nil {
					b.Fatal(err)
				}
				var ids []any
				for rows.Next() {
					var id []byte
					if err := rows.Scan(&id); err != nil {
						b.Fatal(err)
					}
					ids = append(ids, id)
				}
				rows.Close()
				if len(ids) == 0 {
					_ = tx.Rollback()
					return claimed
				}
				in := strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", ")
				if _, err := tx.ExecContext(ctx, "UPDATE "+tb.Name+` SET status = 'DELIVERING', locked_by = 'loop',
					locked_at = UTC_TIMESTAMP(6), updated_at = UTC_TIMESTAMP(6) WHERE event_id IN (`+in+")", ids...); err != nil {
					b.Fatal(err)
				}
				if err := tx.Commit(); err != nil {
					b.Fatal(err)
				}
				claimed += len(ids)
				mustExec(b, db, "UPDATE "+tb.Name+` SET status = 'DELIVERED', delivered_at = UTC_TIMESTAMP(6),
					updated_at = UTC_TIMESTAMP(6), locked_by = NULL, locked_at = NULL
					WHERE event_id IN (`+in+") AND status = 'DELIVERING'", ids...)
			}
		},
	}
}

func total(counts map[outbox.Status]int) int {
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}

func mustExec(b *testing.B, db *sql.DB, query string, args ...any) {
	b.Helper()
	if _, err := db.ExecContext(context.Background(), query, args...); err != nil {
		b.Fatal(err)
	}
}

var loopWorkers = flag.Int("loop.workers", 4, "concurrent loops in BenchmarkClaimLoop")

// BenchmarkClaimLoop is the ceiling the relay is measured against: a bare
// SQL loop (claim a batch with SKIP LOCKED and mark it DELIVERING in one
// transaction, then mark it DELIVERED), -loop.workers of them at once, as
// many as the relay's batches in flight, draining the same backlog with no
// broker, no engine and no event read beyond its id.
func BenchmarkClaimLoop(b *testing.B) {
	tb := newBenchTable(b)
	runLoops(b, tb, tb.loop)
}

// runLoops drains the benchmark's events with -loop.workers runs of loop
// at once and reports the rows a second.
func runLoops(b *testing.B, tb benchTable, loop func(b *testing.B, batch int) int) {
	var total time.Duration
	for range b.N {
		b.StopTimer()
		tb.fill(b, *benchEvents, "bench.event", 0)
		b.StartTimer()
		began := time.Now()
		sc0 := serverCPU()
		var wg sync.WaitGroup
		var mu sync.Mutex
		done := 0
		for range *loopWorkers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n := loop(b, *benchBatch)
				mu.Lock()
				done += n
				mu.Unlock()
			}()
		}
		wg.Wait()
		total += time.Since(began)
		b.Logf("CPU per row: database server %.1f µs", perEvent(serverCPU()-sc0, *benchEvents))
		b.StopTimer()
		if done != *benchEvents || tb.delivered(b) != *benchEvents {
			b.Fatalf("the loops took %d and delivered %d, want %d", done, tb.delivered(b), *benchEvents)
		}
	}
	b.ReportMetric(float64(*benchEvents)*float64(b.N)/total.Seconds(), "rows/s")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkHeldClaimLoop is the storage-side ceiling of held claims
// (LEASE_MODE=lock, PostgreSQL's default): -loop.workers bare SQL loops,
// each locking a batch of -batch rows in write order (FOR UPDATE SKIP
// LOCKED), marking them DELIVERED by row address and committing. The
// relay into null:// (BenchmarkDrainNull) is measured against it.
func BenchmarkHeldClaimLoop(b *testing.B) {
	tb := newBenchTable(b)
	if tb.heldLoop == nil {
		b.Skip("this storage has no held claims")
	}
	runLoops(b, tb, tb.heldLoop)
}

// inChunks calls insert for n events, 10,000 at a time: one statement of
// a million rows would hold its parameters in memory at once.
// benchKey is the partition key of the i-th event of a chunk spread over
// keys keys: chunks are a multiple of keys long for any keys that divides
// 10,000, so the keys take turns across them too.
func benchKey(i, keys int) string { return "key-" + strconv.Itoa(i%keys) }

func inChunks(n int, insert func(k int)) {
	for done := 0; done < n; done += 10_000 {
		insert(min(10_000, n-done))
	}
}
