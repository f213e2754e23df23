package mysql_test

import (
	"errors"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/harness/mysqltest"
	"github.com/outbox-relay/relay/internal/producers"
	"github.com/outbox-relay/relay/pkg/storage"
	"github.com/outbox-relay/relay/pkg/storage/mysql"
)

var upgradeRows = flag.Int("upgrade.rows", 3_000_000, "rows in the table BenchmarkUpgrade migrates")

// BenchmarkUpgrade (make bench MODE=upgrade ROWS=…) upgrades a table of the
// previous release with rows events while four producers insert one event
// per transaction, and reports the longest insert in three steps:
//   - migrate without --allow-blocking, which must refuse state_at's new
//     expression (a rebuild) and change nothing;
//   - that rebuild with --allow-blocking, as in a maintenance window;
//   - migrate --cleanup, which builds the new indexes in place and drops
//     the old ones.
func BenchmarkUpgrade(b *testing.B) {
	for range b.N {
		database := mysqltest.NewDatabase(b)
		db := mysqltest.Admin(b)
		conn, err := db.Conn(ctx)
		if err != nil {
			b.Fatal(err)
		}
		for _, q := range []string{"USE `" + database + "`", previousReleaseTable,
			"INSERT INTO openoutbox_events (event_type, payload, partition_key, status, delivered_at) " +
				"SELECT 'order.created', REPEAT('x', 200), IF(n % 4 = 0, CONCAT('k', n % 1000), NULL), IF(n % 100 = 0, 'PENDING', 'DELIVERED'), " +
				"IF(n % 100 = 0, NULL, UTC_TIMESTAMP(6)) " +
				"FROM (WITH RECURSIVE g (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 1000) SELECT n FROM g) AS g"} {
			if _, err := conn.ExecContext(ctx, q); err != nil {
				b.Fatal(err)
			}
		}
		for total := 1000; total < *upgradeRows; {
			more := min(total, *upgradeRows-total)
			if _, err := conn.ExecContext(ctx, "INSERT INTO openoutbox_events (event_type, payload, partition_key, status, delivered_at) "+
				"SELECT event_type, payload, partition_key, status, delivered_at FROM openoutbox_events LIMIT ?", more); err != nil {
				b.Fatal(err)
			}
			total += more
		}
		_ = conn.Close()
		s, err := mysql.Open(ctx, storage.URLWithTable(mysqltest.DatabaseURL(database), "openoutbox_events"))
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		measure := func(name string, run func(progress func(string)) error) error {
			insert := func() error {
				_, err := s.DB().ExecContext(ctx, "INSERT INTO openoutbox_events (event_type, payload, partition_key) VALUES ('order.created', 'x', 'k1')")
				return err
			}
			p := producers.Start(insert, insert, insert, insert)
			start := time.Now()
			err := run(func(msg string) { b.Logf("%s %s", time.Since(start).Round(time.Millisecond), msg) })
			took := time.Since(start)
			inserted, longest, errs := p.Halt()
			if len(errs) > 0 {
				b.Fatalf("%s: %d inserts failed: %v", name, len(errs), errors.Join(errs...))
			}
			b.Logf("%s: %d rows; took %s (err %v); %d inserts meanwhile, the longest %s",
				name, *upgradeRows, took.Round(time.Millisecond), err, inserted, longest)
			b.ReportMetric(longest.Seconds(), name+"-longest-insert-s")
			return err
		}
		migrate := func(opts storage.MigrateOptions) func(func(string)) error {
			return func(progress func(string)) error {
				opts.Progress = progress
				_, err := s.Migrate(ctx, opts)
				return err
			}
		}
		if err := measure("refused", migrate(storage.MigrateOptions{})); err == nil || !strings.Contains(err.Error(), "--allow-blocking") {
			b.Fatalf("migrate without --allow-blocking: %v, want a refusal", err)
		}
		// The rebuild alone, as --allow-blocking runs it in a maintenance
		// window (here with the producers still writing, to measure it).
		if err := measure("rebuild", func(func(string)) error {
			_, err := s.DB().ExecContext(ctx, "ALTER TABLE openoutbox_events MODIFY COLUMN state_at DATETIME(6) AS "+
				"(CASE status WHEN 'PENDING' THEN GREATEST(available_at, updated_at) WHEN 'DELIVERING' THEN locked_at "+
				"WHEN 'DELIVERED' THEN delivered_at ELSE updated_at END) STORED")
			return err
		}); err != nil {
			b.Fatal(err)
		}
		if err := measure("online", migrate(storage.MigrateOptions{Cleanup: true})); err != nil {
			b.Fatal(err)
		}
	}
}
