package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/driverkit"
	schema "github.com/outbox-relay/relay/schema/postgres"
)

// A migration runs against a table the application writes all the time
// (docs/operations.md, "Upgrades"). So it is not one transaction:
//   - the schema without its indexes (schema.sql: the table, columns,
//     functions, trigger) runs in one short transaction under a short
//     lock_timeout. Each change there holds its lock only for a moment, and
//     a lock that is not free in time is asked for again a little later,
//     so the application's writes never queue behind a migration that
//     waits for a long transaction;
//   - the unfinished rows that predate seq (an Open Outbox table) are
//     numbered in a transaction of their own, which locks rows, not the
//     table;
//   - each index is built with CREATE INDEX CONCURRENTLY, which lets
//     writers go on; on a partitioned table, partition by partition, each
//     then attached to an index made ON ONLY the parent. An index a build
//     cut short left INVALID is dropped and built again;
//   - indexes of earlier releases stay for their relays until --cleanup,
//     which drops them CONCURRENTLY.
// A session advisory lock keeps two migrations from running at once.

// SchemaSQL returns the DDL Migrate applies, for `relay-cli migrate --print`.
func (s *Store) SchemaSQL() string { return schema.Render(s.table) }

// Migrate applies the embedded schema and reports which objects it created
// and which already existed; see the comment above for how it spares the
// table's writers.
func (s *Store) Migrate(ctx context.Context, opts storage.MigrateOptions) (storage.MigrateResult, error) {
	return s.migrate(ctx, schema.RenderBase(s.table), false, opts)
}

// Blocks values of storage.MigrateStep.
const (
	blocksNo      = "no"
	blocksBriefly = "briefly"
)

// migrationLockReport is how often a migration that waits for another says
// so; progressEvery how often an index build reports its progress.
var (
	migrationLockReport = 10 * time.Second
	progressEvery       = 5 * time.Second
)

type migration struct {
	s    *Store
	conn *pgxpool.Conn
	opts storage.MigrateOptions
	res  storage.MigrateResult
	// partitioned says whether the table is partitioned.
	partitioned bool
}

// migrate runs a migration whose schema without indexes is base;
// partitioned says whether base makes a partitioned table.
func (s *Store) migrate(ctx context.Context, base string, partitioned bool, opts storage.MigrateOptions) (storage.MigrateResult, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return storage.MigrateResult{}, s.queryError("migrate table", err)
	}
	defer conn.Release()
	m := &migration{s: s, conn: conn, opts: opts, partitioned: partitioned}
	m.res.LockTimeout = opts.LockTimeoutOrDefault()
	if err := m.run(ctx, base); err != nil {
		// The session's settings and lock must not go back to the pool.
		_ = conn.Conn().PgConn().Close(context.WithoutCancel(ctx))
		return m.res, s.queryError("migrate table", err)
	}
	return m.res, nil
}

func (m *migration) run(ctx context.Context, base string) error {
	if err := m.lock(ctx); err != nil {
		return err
	}
	defer func() {
		bg := context.WithoutCancel(ctx)
		_, _ = m.conn.Exec(bg, "SELECT pg_advisory_unlock($1)", schema.MigrationLockKey)
		_, _ = m.conn.Exec(bg, "RESET lock_timeout")
	}()
	before, err := m.s.schemaObjects(ctx, m.conn)
	if err != nil {
		return err
	}
	if err := m.size(ctx); err != nil {
		return err
	}
	steps := []func(context.Context, []string) error{m.base(base), m.numberRows, m.indexes, m.retired}
	for _, step := range steps {
		if err := step(ctx, before); err != nil {
			return err
		}
	}
	after := before
	if !m.opts.Plan {
		if after, err = m.s.schemaObjects(ctx, m.conn); err != nil {
			return err
		}
	}
	for _, obj := range after {
		if slices.Contains(before, obj) {
			m.res.Existed = append(m.res.Existed, obj)
		} else {
			m.res.Created = append(m.res.Created, obj)
		}
	}
	for _, obj := range before {
		if !slices.Contains(after, obj) {
			m.res.Dropped = append(m.res.Dropped, obj)
		}
	}
	return nil
}

// lock takes the migration lock for the session, waiting for another
// migration (several relays may start with STORAGE_AUTO_MIGRATE at once;
// one may be building an index for minutes).
func (m *migration) lock(ctx context.Context) error {
	start, said := time.Now(), time.Now()
	for {
		var ok bool
		if err := m.conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", schema.MigrationLockKey).Scan(&ok); err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Since(said) >= migrationLockReport {
			said = time.Now()
			m.opts.Report("waiting %s for another migration of this database to finish", time.Since(start).Round(time.Second))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// size records the table's size and kind before the migration.
func (m *migration) size(ctx context.Context) error {
	var kind *string
	err := m.conn.QueryRow(ctx, `SELECT c.relkind::text, pg_total_relation_size(c.oid), greatest(c.reltuples, 0)::bigint
		FROM pg_class c WHERE c.oid = to_regclass($1)`, m.s.table.Quoted()).Scan(&kind, &m.res.TableBytes, &m.res.TableRows)
	if errors.Is(err, pgx.ErrNoRows) {
		// A new table: partitioned as the caller asked.
		m.res.TableBytes, m.res.TableRows = -1, -1
		return nil
	}
	if err != nil {
		return err
	}
	m.partitioned = kind != nil && *kind == "p"
	if m.partitioned {
		// A partitioned table's own size is 0: add its partitions'.
		return m.conn.QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint,
			coalesce(sum(greatest(c.reltuples, 0)), 0)::bigint
			FROM pg_partition_tree($1) t JOIN pg_class c ON c.oid = t.relid WHERE t.isleaf`,
			m.s.table.Quoted()).Scan(&m.res.TableBytes, &m.res.TableRows)
	}
	return nil
}

// inTransaction records a statement in the plan, or runs it in a
// transaction under the lock timeout, tried again while a lock it needs is
// not free in time (briefly). blocks is what the plan says of it.
func (m *migration) inTransaction(ctx context.Context, sql, blocks, why string) error {
	if m.opts.Plan {
		m.res.Plan = append(m.res.Plan, storage.MigrateStep{SQL: sql, Blocks: blocks, Why: why})
		return nil
	}
	return m.briefly(ctx, sql, why)
}

// concurrently records a CONCURRENTLY statement in the plan, or runs it:
// outside a transaction (it cannot run in one) and without a lock timeout,
// since it waits for the transactions running on the table and lets
// writers go on meanwhile.
func (m *migration) concurrently(ctx context.Context, sql, why string) error {
	if m.opts.Plan {
		m.res.Plan = append(m.res.Plan, storage.MigrateStep{SQL: sql, Blocks: blocksNo, Why: why + " (CONCURRENTLY: writers go on)"})
		return nil
	}
	if _, err := m.conn.Exec(ctx, "SET lock_timeout = 0"); err != nil {
		return err
	}
	_, err := m.conn.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol)
	return err
}

// briefly runs sql in one transaction under the lock timeout, again and
// again while a lock it needs is not free in time.
func (m *migration) briefly(ctx context.Context, sql, why string) error {
	timeout := m.opts.LockTimeoutOrDefault()
	lockNotFree := func(err error) bool {
		var pgErr *pgconn.PgError
		return errors.As(err, &pgErr) && pgErr.Code == "55P03"
	}
	return driverkit.RetryLocked(ctx, m.opts, timeout, why, "pg_stat_activity", lockNotFree, func() error {
		return pgx.BeginFunc(ctx, m.conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", max(timeout.Milliseconds(), 1))); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol)
			return err
		})
	})
}

// base runs the schema but its indexes. Its statements change the table
// only where something is missing, each holding its lock for a moment.
func (m *migration) base(ddl string) func(context.Context, []string) error {
	return func(ctx context.Context, before []string) error {
		blocks, why := blocksNo, "the table, its sequence, columns, functions and triggers: all present, nothing changes"
		var missing []string
		for _, obj := range []string{"column seq", "column writer_xid", "trigger " + m.s.table.Name + "_notify", "trigger " + m.s.table.Name + "_writer", "trigger " + m.s.table.Name + "_writer_update"} {
			if !slices.Contains(before, obj) {
				missing = append(missing, obj)
			}
		}
		switch {
		case m.res.TableBytes < 0:
			why = "create the table, its sequence, functions and triggers"
		case len(missing) > 0:
			blocks, why = blocksBriefly, "add "+strings.Join(missing, ", ")+" (no rewrite: each takes its lock for a moment)"
		}
		if m.opts.Plan {
			ddl = "-- schema.sql without its indexes: relay-cli migrate --print shows it whole"
		}
		return m.inTransaction(ctx, ddl, blocks, why)
	}
}

// numberRows numbers the unfinished rows that predate seq, when the base
// just added the column to a table with rows (the column's comment says
// so), or a migration before was cut short.
func (m *migration) numberRows(ctx context.Context, before []string) error {
	if m.opts.Plan {
		if m.res.TableBytes >= 0 && !slices.Contains(before, "column seq") {
			return m.inTransaction(ctx, schema.NumberRows(m.s.table), blocksNo,
				"number the unfinished rows that predate seq (locks those rows, not the table)")
		}
		return nil
	}
	var comment *string
	if err := m.conn.QueryRow(ctx, "SELECT col_description(to_regclass($1), a.attnum) FROM pg_attribute a WHERE a.attrelid = to_regclass($1) AND a.attname = 'seq'",
		m.s.table.Quoted()).Scan(&comment); err != nil {
		return err
	}
	if comment == nil || *comment != schema.SeqNumbering {
		return nil
	}
	m.opts.Report("numbering the unfinished rows that predate seq")
	return m.briefly(ctx, schema.NumberRows(m.s.table), "number the rows that predate seq")
}

// indexState is what the catalog says of one index.
type indexState struct {
	exists, valid bool
}

// indexStates reads the indexes of the relation rel by bare name.
func (m *migration) indexStates(ctx context.Context, rel string) (map[string]indexState, error) {
	rows, err := m.conn.Query(ctx, `SELECT c.relname::text, x.indisvalid FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid
		WHERE x.indrelid = to_regclass($1)`, rel)
	if err != nil {
		return nil, err
	}
	out := map[string]indexState{}
	var name string
	var valid bool
	_, err = pgx.ForEachRow(rows, []any{&name, &valid}, func() error {
		out[name] = indexState{exists: true, valid: valid}
		return nil
	})
	return out, err
}

// indexes builds each index that is missing or INVALID.
func (m *migration) indexes(ctx context.Context, _ []string) error {
	have, err := m.indexStates(ctx, m.s.table.Quoted())
	if err != nil {
		return err
	}
	for _, ix := range schema.Indexes(m.s.table) {
		if m.res.TableBytes < 0 {
			// A table this migration creates: nobody writes to it yet, and
			// CONCURRENTLY would wait for every older transaction in the
			// database. On a partitioned table this makes the index of
			// every partition.
			if err := m.inTransaction(ctx, fmt.Sprintf(`CREATE INDEX IF NOT EXISTS "%s" ON %s %s`, ix.Name, m.s.table.Quoted(), ix.Definition),
				blocksNo, "build index "+ix.Name+" (a new table)"); err != nil {
				return err
			}
			continue
		}
		if m.partitioned {
			if err := m.partitionedIndex(ctx, ix, have[ix.Name]); err != nil {
				return err
			}
			continue
		}
		st := have[ix.Name]
		if st.exists && st.valid {
			continue
		}
		if st.exists {
			// A CREATE INDEX CONCURRENTLY cut short leaves the index
			// INVALID: writers keep it up to date, claims cannot read it,
			// and IF NOT EXISTS would keep it so.
			m.res.Rebuilt = append(m.res.Rebuilt, "index "+ix.Name)
			m.opts.Report("index %s is INVALID (a build was cut short): building it again", ix.Name)
			if err := m.concurrently(ctx, "DROP INDEX CONCURRENTLY IF EXISTS "+m.s.table.Sibling(ix.Name),
				"drop the INVALID index "+ix.Name+" that a build cut short left"); err != nil {
				return err
			}
		}
		if err := m.build(ctx, schema.CreateIndexSQL(m.s.table, ix), ix.Name, "build index "+ix.Name); err != nil {
			return err
		}
	}
	return nil
}

// build runs a CREATE INDEX CONCURRENTLY, reporting its progress.
func (m *migration) build(ctx context.Context, sql, name, why string) error {
	if m.opts.Plan {
		return m.concurrently(ctx, sql, why)
	}
	m.opts.Report("building index %s", name)
	start := time.Now()
	stop := m.watchProgress(ctx, name)
	err := m.concurrently(ctx, sql, why)
	stop()
	if err == nil {
		m.opts.Report("built index %s in %s", name, time.Since(start).Round(time.Millisecond))
	}
	return err
}

// watchProgress reports, every progressEvery, how far the migration's
// index build has got (pg_stat_progress_create_index), until stop.
func (m *migration) watchProgress(ctx context.Context, name string) (stop func()) {
	if m.opts.Progress == nil {
		return func() {}
	}
	pid := m.conn.Conn().PgConn().PID()
	return driverkit.ReportEvery(ctx, progressEvery, func() {
		var phase string
		var blocksDone, blocksTotal, tuplesDone, tuplesTotal, lockersDone, lockersTotal int64
		err := m.s.pool.QueryRow(ctx, `SELECT phase, blocks_done, blocks_total, tuples_done, tuples_total, lockers_done, lockers_total
			FROM pg_stat_progress_create_index WHERE pid = $1`, pid).
			Scan(&phase, &blocksDone, &blocksTotal, &tuplesDone, &tuplesTotal, &lockersDone, &lockersTotal)
		if err == nil {
			m.opts.Report("building index %s: %s", name, describeBuild(phase, blocksDone, blocksTotal, tuplesDone, tuplesTotal, lockersDone, lockersTotal))
		}
	})
}

// describeBuild says how far a build has got in words.
func describeBuild(phase string, blocksDone, blocksTotal, tuplesDone, tuplesTotal, lockersDone, lockersTotal int64) string {
	switch {
	case blocksTotal > 0:
		return fmt.Sprintf("%s, %d%% (%d of %d blocks)", phase, blocksDone*100/blocksTotal, blocksDone, blocksTotal)
	case tuplesTotal > 0:
		return fmt.Sprintf("%s, %d%% (%d of %d rows)", phase, tuplesDone*100/tuplesTotal, tuplesDone, tuplesTotal)
	case lockersTotal > 0:
		return fmt.Sprintf("%s, %d of %d transactions ended", phase, lockersDone, lockersTotal)
	}
	return phase
}

// partitionedIndex makes ix on a partitioned table without blocking
// writers: an index ON ONLY the parent (which takes no time, and is
// INVALID until every partition has its own attached), then each
// partition's built CONCURRENTLY and attached.
func (m *migration) partitionedIndex(ctx context.Context, ix schema.Index, parent indexState) error {
	if parent.exists && parent.valid {
		return nil
	}
	if !parent.exists {
		if err := m.inTransaction(ctx, fmt.Sprintf(`CREATE INDEX IF NOT EXISTS "%s" ON ONLY %s %s`, ix.Name, m.s.table.Quoted(), ix.Definition),
			blocksBriefly, "make index "+ix.Name+" on the partitioned table alone; each partition's follows"); err != nil {
			return err
		}
	}
	parts, err := m.partitions(ctx)
	if err != nil {
		return err
	}
	for _, part := range parts {
		attached, err := m.attachedIndex(ctx, ix.Name, part)
		if err != nil {
			return err
		}
		if attached {
			continue
		}
		child := partitionIndexName(part, strings.TrimPrefix(ix.Name, m.s.table.Name+"_"))
		have, err := m.indexStates(ctx, m.s.table.Sibling(part))
		if err != nil {
			return err
		}
		if st := have[child]; st.exists && !st.valid {
			m.res.Rebuilt = append(m.res.Rebuilt, "index "+child)
			if err := m.concurrently(ctx, "DROP INDEX CONCURRENTLY IF EXISTS "+m.s.table.Sibling(child),
				"drop the INVALID index "+child+" that a build cut short left"); err != nil {
				return err
			}
		}
		if err := m.build(ctx, fmt.Sprintf(`CREATE INDEX CONCURRENTLY IF NOT EXISTS "%s" ON %s %s`, child, m.s.table.Sibling(part), ix.Definition),
			child, "build index "+child+" of partition "+part); err != nil {
			return err
		}
		if err := m.inTransaction(ctx, fmt.Sprintf("ALTER INDEX %s ATTACH PARTITION %s", m.s.table.Sibling(ix.Name), m.s.table.Sibling(child)),
			blocksBriefly, "attach index "+child+" to "+ix.Name); err != nil {
			return err
		}
	}
	return nil
}

// partitions lists the bare names of the table's partitions.
func (m *migration) partitions(ctx context.Context) ([]string, error) {
	rows, err := m.conn.Query(ctx, `SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = to_regclass($1) ORDER BY c.relname`, m.s.table.Quoted())
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// attachedIndex says whether partition part has an index attached to the
// parent's index name.
func (m *migration) attachedIndex(ctx context.Context, name, part string) (bool, error) {
	var ok bool
	err := m.conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_inherits i JOIN pg_index x ON x.indexrelid = i.inhrelid
		WHERE i.inhparent = to_regclass($1) AND x.indrelid = to_regclass($2))`,
		m.s.table.Sibling(name), m.s.table.Sibling(part)).Scan(&ok)
	return ok, err
}

// partitionIndexName is the name of a partition's index: the partition's
// name and the index's suffix, the partition's name cut to fit 63 bytes.
func partitionIndexName(part, suffix string) string {
	if n := 63 - len(suffix) - 1; len(part) > n {
		part = part[:n]
	}
	return part + "_" + suffix
}

// retired drops the indexes of earlier releases with --cleanup, and else
// lists them as kept.
func (m *migration) retired(ctx context.Context, before []string) error {
	for _, name := range schema.Retired(m.s.table) {
		if !slices.Contains(before, "index "+name) {
			continue
		}
		if !m.opts.Cleanup {
			m.res.Kept = append(m.res.Kept, "index "+name)
			continue
		}
		obj := m.s.table.Sibling(name)
		var err error
		if m.partitioned {
			// A partitioned index cannot be dropped CONCURRENTLY.
			err = m.inTransaction(ctx, "DROP INDEX IF EXISTS "+obj, blocksBriefly, "drop index "+name+" of an earlier release")
		} else {
			err = m.concurrently(ctx, "DROP INDEX CONCURRENTLY IF EXISTS "+obj, "drop index "+name+" of an earlier release")
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// schemaObjects lists the table and what hangs off it (schema_objects.sql).
func (s *Store) schemaObjects(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) ([]string, error) {
	rows, err := q.Query(ctx, s.queries["schema_objects"],
		s.table.Quoted(), s.table.Object("seq"), s.table.Object("notify")+"()", s.table.Object("default"),
		s.table.Object("event_id")+"()", s.table.Object("writer")+"()")
	if err != nil {
		return nil, err
	}
	objs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	slices.Sort(objs)
	return objs, err
}

// GrantsSQL returns the least-privilege roles and grants for the table, for
// `relay-cli grants --print`.
func (s *Store) GrantsSQL() string { return schema.RenderGrants(s.table) }

// ApplyGrants creates the outbox_relay, outbox_producer and outbox_admin
// roles if missing and grants them what each needs on the table. It must
// run as the table's owner, after Migrate.
func (s *Store) ApplyGrants(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, s.GrantsSQL(), pgx.QueryExecModeSimpleProtocol); err != nil {
		return s.queryError("grant roles on", err)
	}
	return nil
}
