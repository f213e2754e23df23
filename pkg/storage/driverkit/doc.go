// Package driverkit is for people writing a storage driver: the PostgreSQL
// and MySQL drivers in this repository use it, and a third-party SQL
// driver would too. Programs that only run the relay or read a table
// through package storage never need it.
//
// It holds what every driver does the same way, so that the rules and the
// wording are written once and a driver supplies only its statements and
// how its database reports errors:
//   - its SQL: LoadQueries and MustReadQuery read a driver's embedded
//     .sql files;
//   - Schema: RunMigrate tells what a migration created from what
//     existed, RetryLocked retries a statement whose lock was not free
//     (MigrateLockRetries times) and ReportEvery reports a long one's
//     progress; ContractColumns and CheckColumns are Check's verdict on a
//     table's columns;
//   - errors: QueryError and ConnError explain a statement's failure or an
//     unreachable database (Server, ConnFailure), marked
//     storage.Unreachable; AdminError and TableMissing explain the Admin
//     methods' failures and a missing table (storage.ErrTableMissing);
//   - Admin: RunStats, RunRetryDead and RunPrune check and default the
//     params and decide what runs, PruneWith is all of Prune over a
//     driver's AdminStatements;
//   - producers: WriterFor is a driver's NewWriter, for a writer that
//     embeds storage.Producer;
//   - retention: RunLocked is WithRetentionLock, for a driver that offers
//     storage.RetentionLocker.
//
// The interfaces a driver implements, their params and results, and the
// registry it joins (storage.Register, storage.NewDriver) stay in package
// storage.
package driverkit
