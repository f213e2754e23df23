package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	schema "github.com/outbox-relay/relay/schema/postgres"
)

// DB is a database handle for the table's upkeep: *sql.DB and *sql.Conn
// are DBs. A pgx pool becomes one with stdlib.OpenDBFromPool.
type DB interface {
	Beginner
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// CreateResult says which of the table's objects CreateTable created and
// which already existed, as "table inbox" and "index inbox_processed_at_idx".
type CreateResult struct {
	Created []string
	Existed []string
}

// SchemaSQL returns the DDL CreateTable applies, for teams that apply
// migrations with their own tools (`relay-cli migrate --inbox --print`).
func (b *Inbox) SchemaSQL() string {
	var out strings.Builder
	fmt.Fprintf(&out, "-- Outbox Relay inbox table for %s. Every statement is idempotent.\n\n", b.dialectName())
	// The files sort create_index before create_table; MySQL's index is
	// part of its table (its create_index is for tables made by hand).
	out.WriteString(b.ddl[1] + ";\n")
	if b.dialect == Postgres {
		out.WriteString("\n" + b.ddl[0] + ";\n")
	}
	return out.String()
}

func (b *Inbox) dialectName() string {
	if b.dialect == MySQL {
		return "MySQL 8 / MariaDB 10.6+"
	}
	return "PostgreSQL"
}

// CreateTable creates the inbox table and its processed_at index if they
// are missing, and fails if a table of that name exists without the inbox's
// columns. It never drops or changes anything, so it is safe to run at
// every start, by several processes at once.
func (b *Inbox) CreateTable(ctx context.Context, db DB) (CreateResult, error) {
	var res CreateResult
	var err error
	if b.dialect == Postgres {
		res, err = b.createPostgres(ctx, db)
	} else {
		res, err = b.createMySQL(ctx, db)
	}
	if err != nil {
		return CreateResult{}, fmt.Errorf("inbox: create table %s (%s): %w", b.table, b.dialect, err)
	}
	return res, nil
}

// createPostgres applies the DDL in one transaction under the migration
// lock, so it either all happens or none of it does.
func (b *Inbox) createPostgres(ctx context.Context, db DB) (CreateResult, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return CreateResult{}, err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, b.queries["lock"], schema.MigrationLockKey); err != nil {
		return CreateResult{}, err
	}
	objects := []struct{ kind, name, regclass string }{
		{"table", b.table.Name, b.quote(b.table.Schema, b.table.Name)},
		{"index", b.indexName(), b.quote(b.table.Schema, b.indexName())},
	}
	existed := make([]bool, len(objects))
	for i, o := range objects {
		if err := tx.QueryRowContext(ctx, b.queries["exists"], o.regclass).Scan(&existed[i]); err != nil {
			return CreateResult{}, fmt.Errorf("look up %s %s: %w", o.kind, o.name, err)
		}
	}
	if _, err := tx.ExecContext(ctx, b.queries["create_table"]); err != nil {
		return CreateResult{}, err
	}
	if err := b.checkColumns(ctx, tx); err != nil {
		return CreateResult{}, err
	}
	if _, err := tx.ExecContext(ctx, b.queries["create_index"]); err != nil {
		return CreateResult{}, err
	}
	if err := tx.Commit(); err != nil {
		return CreateResult{}, err
	}
	var res CreateResult
	for i, o := range objects {
		if existed[i] {
			res.Existed = append(res.Existed, o.kind+" "+o.name)
		} else {
			res.Created = append(res.Created, o.kind+" "+o.name)
		}
	}
	return res, nil
}

// createMySQL needs no lock: MySQL commits each DDL statement on its own,
// and CREATE TABLE IF NOT EXISTS is safe to race there.
func (b *Inbox) createMySQL(ctx context.Context, db DB) (CreateResult, error) {
	tableExisted, err := b.exists(ctx, db)
	if err != nil {
		return CreateResult{}, err
	}
	indexExisted := false
	if tableExisted {
		var n int
		if err := db.QueryRowContext(ctx, b.queries["index_exists"], b.table.Schema, b.table.Name, b.indexName()).Scan(&n); err != nil {
			return CreateResult{}, fmt.Errorf("look up index %s: %w", b.indexName(), err)
		}
		indexExisted = n > 0
	}
	if _, err := db.ExecContext(ctx, b.queries["create_table"]); err != nil {
		return CreateResult{}, err
	}
	if err := b.checkColumns(ctx, db); err != nil {
		return CreateResult{}, err
	}
	// A table made by hand may lack the index, which CREATE TABLE IF NOT
	// EXISTS does not add (and MySQL has no CREATE INDEX IF NOT EXISTS).
	if tableExisted && !indexExisted {
		if _, err := db.ExecContext(ctx, b.queries["create_index"]); err != nil {
			return CreateResult{}, err
		}
	}
	var res CreateResult
	add := func(existed bool, obj string) {
		if existed {
			res.Existed = append(res.Existed, obj)
		} else {
			res.Created = append(res.Created, obj)
		}
	}
	add(tableExisted, "table "+b.table.Name)
	add(indexExisted, "index "+b.indexName())
	return res, nil
}

// querier is what checkColumns needs: a *sql.DB or a *sql.Tx.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// checkColumns fails when the table lacks a column the inbox uses: a table
// of the same name that belongs to something else.
func (b *Inbox) checkColumns(ctx context.Context, db querier) error {
	rows, err := db.QueryContext(ctx, b.queries["columns"])
	if err != nil {
		return fmt.Errorf("table %s is not an inbox table (it needs consumer, event_id and processed_at): %w; choose another name with Config.Table", b.table, err)
	}
	return rows.Close()
}

// exists reports whether the table exists.
func (b *Inbox) exists(ctx context.Context, db DB) (bool, error) {
	if b.dialect == Postgres {
		var ok bool
		err := db.QueryRowContext(ctx, b.queries["exists"], b.quote(b.table.Schema, b.table.Name)).Scan(&ok)
		return ok, err
	}
	var n int
	err := db.QueryRowContext(ctx, b.queries["exists"], b.table.Schema, b.table.Name).Scan(&n)
	return n > 0, err
}

// Check verifies that the database answers and the inbox table exists
// with the inbox's columns. A missing table is ErrTableMissing.
func (b *Inbox) Check(ctx context.Context, db DB) error {
	ok, err := b.exists(ctx, db)
	if err != nil {
		return fmt.Errorf("inbox: look up table %s: %w", b.table, err)
	}
	if !ok {
		return fmt.Errorf("inbox: table %s: %w; run `relay-cli migrate --inbox` or Inbox.CreateTable", b.table, ErrTableMissing)
	}
	if err := b.checkColumns(ctx, db); err != nil {
		return fmt.Errorf("inbox: %w", err)
	}
	return nil
}

// PruneBatchSizeDefault is how many records one prune statement deletes
// when PruneParams.BatchSize is zero: short transactions and few locks,
// and still a few hundred statements for a million records.
const PruneBatchSizeDefault = 5000

// PruneParams selects old inbox records to delete.
//
// OlderThan must exceed the longest time after which the consumer can
// still receive an event again: a record deleted while the event can come
// back lets that copy apply a second time. Copies come from the broker
// (redelivery after an unacknowledged delivery, a replay from an earlier
// offset or sequence, up to the stream's retention), and from the relay
// (an event published but not marked delivered is published again once
// its lease expires, and `relay-cli retry-dead` can publish an event again
// long after a first copy went out). Keep it above the broker's retention
// and the age of the DEAD events anyone may retry: weeks, not hours.
type PruneParams struct {
	// OlderThan is the age, by processed_at, a record must exceed.
	OlderThan time.Duration
	// Consumer restricts the prune to one consumer's records; empty means
	// every consumer's.
	Consumer string
	// BatchSize bounds the records one statement (and transaction)
	// deletes; 0 means PruneBatchSizeDefault.
	BatchSize int
	// DryRun only counts the records that would be deleted.
	DryRun bool
	// Progress, when set, is called after every batch with the records
	// deleted so far.
	Progress func(deleted int64)
}

// PruneResult says how many records a prune deleted (or, in a dry run,
// would delete) and in how many statements.
type PruneResult struct {
	Deleted int64
	Batches int
}

// Prune deletes records older than p.OlderThan in batches, each its own
// short transaction, until none are left; consumers keep recording events
// meanwhile. Interrupted through ctx, it returns what the finished batches
// deleted with the error. Age is measured by the database's clock.
func (b *Inbox) Prune(ctx context.Context, db DB, p PruneParams) (PruneResult, error) {
	var res PruneResult
	switch {
	case p.OlderThan < 0:
		return res, fmt.Errorf("inbox: prune: OlderThan must not be negative, got %s", p.OlderThan)
	case p.BatchSize < 0:
		return res, fmt.Errorf("inbox: prune: BatchSize must not be negative, got %d", p.BatchSize)
	}
	if p.Consumer != "" {
		if err := checkID("consumer name", p.Consumer); err != nil {
			return res, err
		}
	}
	if p.BatchSize == 0 {
		p.BatchSize = PruneBatchSizeDefault
	}
	if err := b.Check(ctx, db); err != nil {
		return res, err
	}
	age := p.OlderThan.Microseconds()
	if p.DryRun {
		query, args := b.queries["prune_count"], []any{age}
		if p.Consumer != "" {
			query, args = b.queries["prune_count_consumer"], append(args, p.Consumer)
		}
		if err := db.QueryRowContext(ctx, query, args...).Scan(&res.Deleted); err != nil {
			return res, fmt.Errorf("inbox: count records to prune in %s: %w", b.table, err)
		}
		return res, nil
	}
	query, args := b.pruneStatement(age, p)
	for {
		n, err := b.pruneBatch(ctx, db, query, args)
		if err != nil {
			return res, fmt.Errorf("inbox: prune %s: %w", b.table, err)
		}
		res.Batches++
		res.Deleted += n
		if p.Progress != nil {
			p.Progress(res.Deleted)
		}
		if n < int64(p.BatchSize) {
			return res, nil
		}
	}
}

func (b *Inbox) pruneStatement(age int64, p PruneParams) (string, []any) {
	query := b.queries["prune"]
	if p.Consumer != "" {
		query = b.queries["prune_consumer"]
	}
	if b.dialect == Postgres {
		args := []any{age, p.BatchSize}
		if p.Consumer != "" {
			args = append(args, p.Consumer)
		}
		return query, args
	}
	args := []any{age}
	if p.Consumer != "" {
		args = append(args, p.Consumer)
	}
	return query, append(args, p.BatchSize)
}

// pruneBatch deletes one batch. On MySQL it runs at READ COMMITTED: at
// InnoDB's default REPEATABLE READ, a ranged DELETE also locks the gaps
// between index records, and consumers inserting records would wait for
// it.
func (b *Inbox) pruneBatch(ctx context.Context, db DB, query string, args []any) (int64, error) {
	if b.dialect == Postgres {
		r, err := db.ExecContext(ctx, query, args...)
		if err != nil {
			return 0, err
		}
		return r.RowsAffected()
	}
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	r, err := tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	n, err := r.RowsAffected()
	if err != nil {
		return 0, err
	}
	return n, tx.Commit()
}
