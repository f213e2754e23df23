package postgres

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/relay/pkg/storage"
	schema "github.com/outbox-relay/relay/schema/postgres"
)

// SchemaSQL returns the DDL Migrate applies, for `relay-cli migrate --print`.
func (s *Store) SchemaSQL() string { return schema.Render(s.table) }

// Migrate applies the embedded schema in one transaction and reports which
// objects it created and which already existed.
func (s *Store) Migrate(ctx context.Context) (storage.MigrateResult, error) {
	return s.migrate(ctx, schema.Render(s.table))
}

func (s *Store) migrate(ctx context.Context, ddl string) (storage.MigrateResult, error) {
	inLockedTx := func(fn func(pgx.Tx) error) error {
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, s.queries["migrate_begin"], schema.MigrationLockKey); err != nil {
				return err
			}
			return fn(tx)
		})
	}
	objects := func(tx pgx.Tx) ([]string, error) { return s.schemaObjects(ctx, tx) }
	res, err := storage.RunMigrate(inLockedTx, objects, func(tx pgx.Tx, _ []string) error {
		// The DDL creates only what is missing itself. Simple protocol:
		// it is several statements.
		_, err := tx.Exec(ctx, ddl, pgx.QueryExecModeSimpleProtocol)
		return err
	})
	if err != nil {
		return res, s.queryError("migrate table", err)
	}
	return res, nil
}

func (s *Store) schemaObjects(ctx context.Context, tx pgx.Tx) ([]string, error) {
	rows, err := tx.Query(ctx, s.queries["schema_objects"],
		s.table.Quoted(), s.table.Object("seq"), s.table.Object("notify")+"()", s.table.Object("default"),
		s.table.Object("event_id")+"()")
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
