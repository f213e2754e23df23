package postgres

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/relay/pkg/storage"
	schema "github.com/outbox-relay/relay/schema/postgres"
)

// migrateLockKey serialises concurrent migrations (several relays starting
// with STORAGE_AUTO_MIGRATE at once) on one advisory lock.
const migrateLockKey = 0x6f7574626f78 // "outbox"

// derivedObjects are the suffixes of the indexes and sequence schema.sql
// names after the table, reported by Migrate.
var derivedObjects = []string{
	"pkey", "seq", "pending_idx", "pending_age_idx", "key_order_idx", "key_dead_idx", "unkeyed_idx",
	"delivering_idx", "delivered_idx", "dead_idx",
}

// SchemaSQL returns the DDL Migrate applies, for `relay-cli migrate --print`.
func (s *Store) SchemaSQL() string { return schema.Render(s.table) }

// Migrate applies the embedded schema in one transaction and reports which
// objects it created and which already existed.
func (s *Store) Migrate(ctx context.Context) (storage.MigrateResult, error) {
	var res storage.MigrateResult
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrateLockKey); err != nil {
			return err
		}
		// Creating what is missing locks the table; behind a long
		// transaction that lock would queue and block every producer's
		// insert. Better to fail and say so.
		if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '10s'"); err != nil {
			return err
		}
		before, err := s.schemaObjects(ctx, tx)
		if err != nil {
			return err
		}
		// Simple protocol: the schema is several statements.
		if _, err := tx.Exec(ctx, schema.Render(s.table), pgx.QueryExecModeSimpleProtocol); err != nil {
			return err
		}
		after, err := s.schemaObjects(ctx, tx)
		if err != nil {
			return err
		}
		for _, obj := range after {
			if slices.Contains(before, obj) {
				res.Existed = append(res.Existed, obj)
			} else {
				res.Created = append(res.Created, obj)
			}
		}
		return nil
	})
	if err != nil {
		return res, s.queryError("migrate table", err)
	}
	return res, nil
}

func (s *Store) schemaObjects(ctx context.Context, tx pgx.Tx) ([]string, error) {
	derived := make([]string, len(derivedObjects))
	for i, suffix := range derivedObjects {
		derived[i] = s.table.Name + "_" + suffix
	}
	rows, err := tx.Query(ctx, s.queries["schema_objects"],
		s.table.Quoted(), derived, s.table.Object("notify")+"()")
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
