package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/relay/pkg/storage"
	schema "github.com/outbox-relay/relay/schema/postgres"
)

// Time-partitioned tables: PARTITION BY RANGE (created_at), one partition a
// day or an hour in UTC, plus a default partition that takes whatever no
// time partition covers, so that no insert ever fails.
//
// Dropping a partition takes an ACCESS EXCLUSIVE lock on the table (DROP
// TABLE of a partition and DETACH PARTITION both do; DETACH PARTITION
// CONCURRENTLY would not, but PostgreSQL refuses it while a default
// partition exists). So the partition is checked without locks first, and
// only one that looks droppable is locked, checked again under the lock
// with index probes (no scan) and dropped in the same transaction, under a
// short lock_timeout: claims and inserts wait at most that long, and a
// partition whose lock is not granted is kept for the next cycle.

var (
	_ storage.Partitioner       = (*Store)(nil)
	_ storage.PartitionMigrator = (*Store)(nil)
)

// PartitionLockTimeout bounds how long partition maintenance waits for a
// lock, and so how long claims and inserts queued behind it wait.
const PartitionLockTimeout = time.Second

// maxAhead bounds the partitions created ahead: every query visits each
// partition, so a horizon of years by the hour would slow every claim.
const maxAhead = 1000

// partitionLockClass is the high half of the maintenance advisory lock key.
const partitionLockClass = 0x7061 // "pa"

// PartitionedSchemaSQL returns the DDL MigratePartitioned applies, for
// `relay-cli migrate --partition-by … --print`; an unknown by gives "".
func (s *Store) PartitionedSchemaSQL(by string) string {
	ddl, err := schema.RenderPartitioned(s.table, by)
	if err != nil {
		return ""
	}
	return ddl
}

// MigratePartitioned creates the table partitioned by by ("day" or
// "hour"), its default partition and the partitions of the next few
// periods, and everything Migrate creates. A table that exists must be
// partitioned the same way; an unpartitioned one is never converted.
func (s *Store) MigratePartitioned(ctx context.Context, by string, opts storage.MigrateOptions) (storage.MigrateResult, error) {
	ddl, err := schema.RenderPartitionedBase(s.table, by)
	if err != nil {
		return storage.MigrateResult{}, err
	}
	have, err := s.Partitioning(ctx)
	switch {
	case errors.Is(err, storage.ErrTableMissing):
	case err != nil:
		return storage.MigrateResult{}, err
	case have == "":
		return storage.MigrateResult{}, fmt.Errorf("table %s exists and is not partitioned: migrate --partition-by creates a new table only; see \"Partitioned tables\" in docs/operations.md to move it over", s.table)
	case have != by:
		return storage.MigrateResult{}, fmt.Errorf("table %s is partitioned by %s, not %s: run migrate --partition-by %s", s.table, have, by, have)
	}
	return s.migrate(ctx, ddl, true, opts)
}

// Partitioning says how the table is partitioned: "", "day" or "hour",
// read from its partition key and the width of its time partitions.
func (s *Store) Partitioning(ctx context.Context) (string, error) {
	var exists bool
	var key string
	if err := s.pool.QueryRow(ctx, s.queries["partition_key"], s.table.Quoted()).Scan(&exists, &key); err != nil {
		return "", s.queryError("read the partitioning of", err)
	}
	if !exists {
		return "", s.tableMissing("")
	}
	if key == "" {
		return "", nil
	}
	if key != "RANGE (created_at)" {
		return "", fmt.Errorf("table %s is partitioned by %s, which the relay does not maintain: it needs RANGE (created_at) by day or hour", s.table, key)
	}
	parts, err := s.partitionList(ctx)
	if err != nil {
		return "", err
	}
	by := ""
	for _, p := range parts {
		if p.isDefault || p.from.IsZero() || p.to.IsZero() {
			continue
		}
		got := ""
		for name, pp := range schema.Partitionings {
			if p.to.Sub(p.from) == pp.Step {
				got = name
			}
		}
		if got == "" || (by != "" && got != by) {
			return "", fmt.Errorf("table %s has partition %s covering %s to %s; the relay maintains partitions of one day or one hour only",
				s.table, p.name, p.from.UTC().Format(time.RFC3339), p.to.UTC().Format(time.RFC3339))
		}
		by = got
	}
	if by == "" {
		return "", fmt.Errorf("table %s is partitioned but has no time partitions to tell day from hour: run `relay-cli migrate --partition-by day` (or hour) to create them", s.table)
	}
	return by, nil
}

// partition is one row of partition_list.sql.
type partition struct {
	name      string
	qualified string // quoted, schema-qualified: ready for SQL
	oid       uint32
	isDefault bool
	from, to  time.Time // zero when the bound is not a finite range
	bytes     int64
}

func (s *Store) partitionList(ctx context.Context) ([]partition, error) {
	rows, err := s.pool.Query(ctx, s.queries["partition_list"], s.table.Quoted())
	if err != nil {
		return nil, s.queryError("list the partitions of", err)
	}
	parts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (partition, error) {
		var p partition
		var from, to *time.Time
		err := r.Scan(&p.name, &p.qualified, &p.oid, &p.isDefault, &from, &to, &p.bytes)
		if from != nil {
			p.from = *from
		}
		if to != nil {
			p.to = *to
		}
		return p, err
	})
	if err != nil {
		return nil, s.queryError("list the partitions of", err)
	}
	return parts, nil
}

// Partitions lists the table's partitions, oldest first and the default
// partition last, with their rows by status (one pass over the table).
func (s *Store) Partitions(ctx context.Context) ([]storage.PartitionInfo, error) {
	if _, err := s.Partitioning(ctx); err != nil {
		return nil, err
	}
	parts, err := s.partitionList(ctx)
	if err != nil {
		return nil, err
	}
	counts := map[uint32]map[string]int64{}
	rows, err := s.pool.Query(ctx, s.queries["partition_counts"])
	if err != nil {
		return nil, s.queryError("count the rows of", err)
	}
	var oid uint32
	var status string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&oid, &status, &n}, func() error {
		if counts[oid] == nil {
			counts[oid] = map[string]int64{}
		}
		counts[oid][status] = n
		return nil
	})
	if err != nil {
		return nil, s.queryError("count the rows of", err)
	}
	out := make([]storage.PartitionInfo, 0, len(parts))
	for _, p := range parts {
		rows := counts[p.oid]
		if rows == nil {
			rows = map[string]int64{}
		}
		out = append(out, storage.PartitionInfo{Name: p.name, From: p.from, To: p.to, Rows: rows, Bytes: p.bytes})
	}
	return out, nil
}

// MaintainPartitions creates the partitions from the current period to
// now+p.Ahead where missing, and one for every earlier period whose rows
// wait in the default partition (moving them in), then drops the expired
// partitions that hold nothing to keep. A partition counts as expired once
// its range ended longer ago than the shorter retention (see dropGrace). One relay at a time: while another
// is at it, it returns an empty report. Errors creating a partition do not
// stop the drops; they are returned together at the end.
func (s *Store) MaintainPartitions(ctx context.Context, p storage.PartitionPolicy) (storage.PartitionReport, error) {
	rep := storage.PartitionReport{DroppedRows: map[string]int64{}}
	by, err := s.Partitioning(ctx)
	if err != nil || by == "" {
		return rep, err
	}
	part := schema.Partitionings[by]
	var user, ownerRole string
	var owner bool
	if err := s.pool.QueryRow(ctx, s.queries["partition_owner"], s.table.Quoted()).Scan(&user, &owner, &ownerRole); err != nil {
		return rep, s.queryError("maintain the partitions of", err)
	}
	if !owner {
		return rep, fmt.Errorf("maintain the partitions of %s: user %q does not own the table, and only its owner may create and drop partitions; make the user a member of the owner role or run `relay-cli partitions --maintain` as the owner (see \"Partitioned tables\" in docs/operations.md)", s.table, user)
	}

	// The advisory lock lives in a transaction of its own on its own
	// connection, so that it is released whatever happens to ctx.
	guard, err := s.pool.Begin(ctx)
	if err != nil {
		return rep, s.queryError("maintain the partitions of", err)
	}
	defer func() { _ = guard.Rollback(context.WithoutCancel(ctx)) }()
	var mine bool
	if err := guard.QueryRow(ctx, s.queries["partition_lock"], partitionLockClass, s.table.Quoted()).Scan(&mine); err != nil {
		return rep, s.queryError("maintain the partitions of", err)
	}
	if !mine {
		return rep, nil
	}

	var now time.Time
	if err := s.pool.QueryRow(ctx, s.queries["partition_now"]).Scan(&now); err != nil {
		return rep, s.queryError("maintain the partitions of", err)
	}
	parts, err := s.partitionList(ctx)
	if err != nil {
		return rep, err
	}
	var def *partition
	have := map[string]bool{}
	for i := range parts {
		have[parts[i].name] = true
		if parts[i].isDefault {
			def = &parts[i]
		}
	}

	if n := int(p.Ahead / part.Step); n > maxAhead {
		return rep, fmt.Errorf("maintain the partitions of %s: %s ahead is %d partitions by %s; at most %d are created ahead", s.table, p.Ahead, n, by, maxAhead)
	}
	var errs []error
	var starts []time.Time
	for start := part.Start(now); start.Before(now.Add(p.Ahead)) || start.Equal(part.Start(now)); start = start.Add(part.Step) {
		starts = append(starts, start)
	}
	if def != nil {
		waiting, err := s.defaultPeriods(ctx, def, by, now.Add(p.Ahead))
		if err != nil {
			errs = append(errs, err)
		}
		starts = append(waiting, starts...)
	}
	for _, start := range starts {
		name := part.PartitionName(s.table, start)
		if have[name] {
			continue
		}
		err := s.createPartition(ctx, def, ownerRole, name, start, start.Add(part.Step))
		if errors.Is(err, errTooManyToMove) {
			rep.Kept = append(rep.Kept, storage.KeptPartition{Name: def.name,
				Reason: fmt.Sprintf("%v; %s is not created and they stay there, claimed as usual (relay-cli prune removes them once finished)", err, name)})
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("create partition %s of %s: %w", name, s.table, err))
			continue
		}
		have[name] = true
		rep.Created = append(rep.Created, name)
	}

	if len(rep.Created) > 0 {
		// Periods moved out of the default partition may be expired.
		if parts, err = s.partitionList(ctx); err != nil {
			return rep, errors.Join(append(errs, err)...)
		}
	}
	grace, drops := dropGrace(p)
	for _, pt := range parts {
		if !drops || pt.isDefault || pt.to.IsZero() || pt.to.Add(grace).After(now) {
			continue
		}
		rows, reason, err := s.dropPartition(ctx, pt, p)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("drop partition %s of %s: %w", pt.name, s.table, err))
		case reason != "":
			rep.Kept = append(rep.Kept, storage.KeptPartition{Name: pt.name, Reason: reason})
		default:
			rep.Dropped = append(rep.Dropped, pt.name)
			for status, n := range rows {
				rep.DroppedRows[status] += n
			}
		}
	}
	return rep, errors.Join(errs...)
}

// dropGrace is how long after its range ends a partition is first
// considered for dropping: the shorter retention, since none of its rows
// can have expired before. A partition whose rows cannot have expired yet
// is neither read nor reported as kept, so Kept names only partitions held
// by something unusual (an unfinished row, a late death). With both
// retentions negative nothing is ever dropped.
func dropGrace(p storage.PartitionPolicy) (time.Duration, bool) {
	switch {
	case p.DeliveredRetention < 0 && p.DeadRetention < 0:
		return 0, false
	case p.DeliveredRetention < 0:
		return p.DeadRetention, true
	case p.DeadRetention < 0:
		return p.DeliveredRetention, true
	}
	return min(p.DeliveredRetention, p.DeadRetention), true
}

// defaultPeriods lists the starts of the periods before until whose rows
// wait in the default partition.
func (s *Store) defaultPeriods(ctx context.Context, def *partition, by string, until time.Time) ([]time.Time, error) {
	q := strings.ReplaceAll(s.queries["partition_default_periods"], "{{partition}}", def.qualified)
	rows, err := s.pool.Query(ctx, q, by, until)
	if err != nil {
		return nil, fmt.Errorf("read the default partition of %s: %w", s.table, err)
	}
	starts, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil {
		return nil, fmt.Errorf("read the default partition of %s: %w", s.table, err)
	}
	return starts, nil
}

// createPartition creates name for [from, to) as a table of its own, moves
// the rows of that range out of the default partition into it, and
// attaches it, in one transaction.
//
// With no rows to move (the usual case: a partition created ahead of
// time) the table is only locked SHARE UPDATE EXCLUSIVE, which ATTACH
// PARTITION takes and inserts and claims do not wait for; the default
// partition is locked ACCESS EXCLUSIVE for the check that none of its rows
// belongs to the new range. Rows to move take the table's ACCESS EXCLUSIVE
// lock as well, first: a statement that started before the partition
// existed would otherwise not see the rows that moved into it, and a
// relay's settle of such a row would miss it.
func (s *Store) createPartition(ctx context.Context, def *partition, owner, name string, from, to time.Time) error {
	moving := false
	if def != nil {
		limit := s.moveLimit()
		var waiting int64
		q := strings.ReplaceAll(s.queries["partition_waiting"], "{{default}}", def.qualified)
		if err := s.pool.QueryRow(ctx, q, from, to, limit+1).Scan(&waiting); err != nil {
			return err
		}
		if waiting > limit {
			return fmt.Errorf("%w: more than %d rows of %s to %s wait in %s", errTooManyToMove, limit,
				from.UTC().Format("2006-01-02 15:04"), to.UTC().Format("2006-01-02 15:04"), def.name)
		}
		moving = waiting > 0
	}
	err := s.attachPartition(ctx, def, owner, name, from, to, moving)
	if errors.Is(err, errRowsArrived) {
		err = s.attachPartition(ctx, def, owner, name, from, to, true)
	}
	return err
}

// PartitionMoveLimit is the most rows maintenance moves out of the default
// partition into a new partition: the move holds the table's ACCESS
// EXCLUSIVE lock, and every claim and insert waits for it. A period with
// more rows waiting keeps them in the default partition, where they are
// claimed as usual and prune removes them once finished.
const PartitionMoveLimit = 50000

// errTooManyToMove: a period has more than the move limit of rows waiting
// in the default partition.
var errTooManyToMove = errors.New("too many rows to move under the table's lock")

func (s *Store) moveLimit() int64 {
	if s.partitionMoveLimit > 0 {
		return s.partitionMoveLimit
	}
	return PartitionMoveLimit
}

// errRowsArrived: rows to move arrived in the default partition after it
// was found empty for the range, before it was locked.
var errRowsArrived = errors.New("rows arrived in the default partition")

// The new partition is given to the table's owner, so that whichever
// member of the owner role runs maintenance later may drop it.
func (s *Store) attachPartition(ctx context.Context, def *partition, owner, name string, from, to time.Time, moving bool) error {
	qualified := s.table.Object(strings.TrimPrefix(name, s.table.Name+"_"))
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, s.queries["partition_ddl_begin"], s.lockTimeout()); err != nil {
			return err
		}
		if moving {
			if _, err := tx.Exec(ctx, "LOCK TABLE ONLY "+s.table.Quoted()+" IN ACCESS EXCLUSIVE MODE"); err != nil {
				return lockErr(err)
			}
		}
		if def != nil {
			if _, err := tx.Exec(ctx, "LOCK TABLE "+def.qualified+" IN ACCESS EXCLUSIVE MODE"); err != nil {
				return lockErr(err)
			}
			if !moving {
				var waiting int64
				q := strings.ReplaceAll(s.queries["partition_waiting"], "{{default}}", def.qualified)
				if err := tx.QueryRow(ctx, q, from, to, 1).Scan(&waiting); err != nil {
					return err
				}
				if waiting > 0 {
					return errRowsArrived
				}
			}
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf("CREATE TABLE %s (LIKE %s INCLUDING DEFAULTS INCLUDING CONSTRAINTS)",
			qualified, s.table.Quoted())); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "ALTER TABLE "+qualified+" OWNER TO "+owner); err != nil {
			return err
		}
		if moving {
			if _, err := tx.Exec(ctx, s.queries["partition_move_mark"]); err != nil {
				return err
			}
			q := strings.NewReplacer("{{default}}", def.qualified, "{{partition}}", qualified).
				Replace(s.queries["partition_move"])
			if _, err := tx.Exec(ctx, q, from, to); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, strings.ReplaceAll(s.queries["partition_move_writer"], "{{partition}}", qualified)); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, fmt.Sprintf("ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM (%s) TO (%s)",
			s.table.Quoted(), qualified, bound(from), bound(to)))
		return lockErr(err)
	})
}

// bound is t as a timestamptz literal for a partition bound.
func bound(t time.Time) string {
	return "'" + t.UTC().Format("2006-01-02 15:04:05.999999") + "+00'"
}

// lockTimeout is PartitionLockTimeout, or what a test set, for lock_timeout.
func (s *Store) lockTimeout() string {
	d := PartitionLockTimeout
	if s.partitionLockTimeout > 0 {
		d = s.partitionLockTimeout
	}
	return fmt.Sprintf("%dms", d.Milliseconds())
}

// errLockNotGranted marks a lock that lock_timeout gave up on.
var errLockNotGranted = errors.New("lock not granted")

func lockErr(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
		return fmt.Errorf("%w in time (the table was busy); tried again next time: %v", errLockNotGranted, err)
	}
	return err
}

// dropPartition drops pt unless it holds a row to keep; then it returns why
// it kept it. rows counts what it held, by status, as read just before the
// lock. A kept partition costs a few partial-index reads, not a scan.
func (s *Store) dropPartition(ctx context.Context, pt partition, p storage.PartitionPolicy) (rows map[string]int64, reason string, err error) {
	delivered, dead := retentionArg(p.DeliveredRetention), retentionArg(p.DeadRetention)
	var keeps [4]int64
	q := strings.ReplaceAll(s.queries["partition_keeps"], "{{partition}}", pt.qualified)
	if err := s.pool.QueryRow(ctx, q, delivered, dead, keepCountCap).Scan(&keeps[0], &keeps[1], &keeps[2], &keeps[3]); err != nil {
		return nil, "", err
	}
	if keeps != [4]int64{} {
		return nil, keptReason(keeps), nil
	}
	res, err := s.pool.Query(ctx, strings.ReplaceAll(s.queries["partition_rows"], "{{partition}}", pt.qualified))
	if err != nil {
		return nil, "", err
	}
	rows = map[string]int64{}
	var status string
	var n int64
	if _, err := pgx.ForEachRow(res, []any{&status, &n}, func() error {
		rows[status] = n
		return nil
	}); err != nil {
		return nil, "", err
	}

	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, s.queries["partition_ddl_begin"], s.lockTimeout()); err != nil {
			return err
		}
		// The table first, as every query takes its locks: a claim holds
		// the table and waits for the partition, never the other way round.
		if _, err := tx.Exec(ctx, "LOCK TABLE ONLY "+s.table.Quoted()+" IN ACCESS EXCLUSIVE MODE"); err != nil {
			return lockErr(err)
		}
		var blocked bool
		q := strings.ReplaceAll(s.queries["partition_blocked"], "{{partition}}", pt.qualified)
		if err := tx.QueryRow(ctx, q, delivered, dead).Scan(&blocked); err != nil {
			return lockErr(err)
		}
		if blocked {
			reason = "a row to keep arrived while it was being dropped"
			return nil
		}
		_, err := tx.Exec(ctx, "DROP TABLE "+pt.qualified)
		return lockErr(err)
	})
	if errors.Is(err, errLockNotGranted) {
		return nil, err.Error(), nil
	}
	if err != nil || reason != "" {
		return nil, reason, err
	}
	return rows, "", nil
}

// retentionArg is a retention for partition_rows.sql: microseconds, or
// NULL (keep forever) when negative.
func retentionArg(d time.Duration) *int64 {
	if d < 0 {
		return nil
	}
	us := d.Microseconds()
	return &us
}

// keepCountCap bounds the counts in a kept partition's reason.
const keepCountCap = 10000

// keptReason says which rows keep a partition, from their counts by
// status (PENDING, DELIVERING, DELIVERED, DEAD), e.g. "holds 3 PENDING,
// 10000+ DELIVERED row(s) unfinished or not past retention".
func keptReason(keeps [4]int64) string {
	var parts []string
	for i, status := range []string{"PENDING", "DELIVERING", "DELIVERED", "DEAD"} {
		switch n := keeps[i]; {
		case n >= keepCountCap:
			parts = append(parts, fmt.Sprintf("%d+ %s", n, status))
		case n > 0:
			parts = append(parts, fmt.Sprintf("%d %s", n, status))
		}
	}
	return "holds " + strings.Join(parts, ", ") + " row(s) unfinished or not past retention"
}
