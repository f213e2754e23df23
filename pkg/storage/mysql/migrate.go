package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/outbox-relay/relay/pkg/storage"
	schema "github.com/outbox-relay/relay/schema/mysql"
)

// migrationLockWait is how long Migrate and ApplyGrants wait for another
// migration on the server to finish.
const migrationLockWait = 60 * time.Second

// SchemaSQL returns the DDL Migrate applies to a database without the
// table, for `relay-cli migrate --print`. (An existing table gets only what
// it lacks; see schema/mysql/upgrade.sql.)
func (s *Store) SchemaSQL() string { return schema.Render(s.table) }

// Migrate creates the table when it is missing, then adds whatever an
// existing table lacks (the seq column, state_at or its current
// expression, each index), and reports which
// objects it created and which already existed. MySQL commits each DDL
// statement by itself, so a migration is not one transaction; a named lock
// keeps two migrations from running at once, and every step checks first,
// so a migration cut short is finished by the next.
func (s *Store) Migrate(ctx context.Context) (storage.MigrateResult, error) {
	withLock := func(fn func(*sql.Conn) error) error { return s.withMigrationLock(ctx, fn) }
	objects := func(conn *sql.Conn) ([]string, error) { return s.schemaObjects(ctx, conn) }
	res, err := storage.RunMigrate(withLock, objects, func(conn *sql.Conn, before []string) error {
		if !slices.Contains(before, "table "+s.table.Name) {
			for _, stmt := range schema.Statements(schema.Render(s.table)) {
				if _, err := conn.ExecContext(ctx, stmt); err != nil {
					return err
				}
			}
		}
		have, err := s.schemaObjects(ctx, conn)
		if err != nil {
			return err
		}
		for _, u := range schema.Upgrades(s.table) {
			if slices.Contains(have, u.Object) {
				continue
			}
			if _, err := conn.ExecContext(ctx, u.SQL); err != nil {
				return fmt.Errorf("add %s: %w", u.Object, err)
			}
		}
		return nil
	})
	if err != nil {
		return res, s.queryError("migrate table", err)
	}
	return res, nil
}

// withMigrationLock runs fn on a connection holding the server-wide
// migration lock, with a bounded wait for metadata locks.
func (s *Store) withMigrationLock(ctx context.Context, fn func(*sql.Conn) error) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var locked sql.NullInt64
	if err := conn.QueryRowContext(ctx, s.queries["migrate_lock"], schema.MigrationLock,
		int(migrationLockWait/time.Second)).Scan(&locked); err != nil {
		return err
	}
	if locked.Int64 != 1 {
		return fmt.Errorf("another migration on this server held the lock %q for %s", schema.MigrationLock, migrationLockWait)
	}
	defer func() {
		bg := context.WithoutCancel(ctx)
		_, _ = conn.ExecContext(bg, s.queries["migrate_session_reset"])
		_, _ = conn.ExecContext(bg, s.queries["migrate_unlock"], schema.MigrationLock)
	}()
	if _, err := conn.ExecContext(ctx, s.queries["migrate_session"]); err != nil {
		return err
	}
	return fn(conn)
}

func (s *Store) schemaObjects(ctx context.Context, conn querier) ([]string, error) {
	rows, err := conn.QueryContext(ctx, s.queries["schema_objects"],
		s.database, s.table.Name, s.database, s.table.Name, s.database, s.table.Name, s.database, s.table.Name)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var objs []string
	for rows.Next() {
		var o string
		if err := rows.Scan(&o); err != nil {
			return nil, err
		}
		objs = append(objs, o)
	}
	slices.Sort(objs)
	return objs, rows.Err()
}

// GrantsSQL returns the least-privilege roles and grants for the table, for
// `relay-cli grants --print`.
func (s *Store) GrantsSQL() string { return schema.RenderGrants(s.table) }

// ApplyGrants creates the outbox_relay, outbox_producer and outbox_admin
// roles if missing and grants them what each needs on the table. It must
// run as an account that may create roles and grant on the table, after
// Migrate.
func (s *Store) ApplyGrants(ctx context.Context) error {
	err := s.withMigrationLock(ctx, func(conn *sql.Conn) error {
		for _, stmt := range schema.Statements(s.GrantsSQL()) {
			if _, err := conn.ExecContext(ctx, stmt); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return s.queryError("grant roles on", err)
	}
	return nil
}
