package storage

import (
	"context"
	"time"
)

// Partitioner is offered by a storage whose table can be partitioned by
// time (PostgreSQL declarative partitioning on created_at). It is
// optional: the relay's retention loop finds it with a type assertion and
// deletes rows one batch at a time where it is missing or the table is
// not partitioned.
type Partitioner interface {
	// Partitioning says how the table is partitioned: "" when it is not,
	// else "day" or "hour". A missing table is an error wrapping
	// ErrTableMissing.
	Partitioning(ctx context.Context) (string, error)
	// MaintainPartitions creates the partitions p.Ahead covers where
	// missing, then drops every partition whose whole time range has
	// passed and which holds only rows past their retention: DELIVERED
	// older than p.DeliveredRetention, DEAD older than p.DeadRetention.
	// It never drops a partition that holds a PENDING or DELIVERING row
	// or a row not yet past its retention; those are reported in
	// PartitionReport.Kept with the reason, as is one whose lock was not
	// granted in time. A driver with a default partition also creates the
	// partitions of past periods whose rows wait there, moving them in.
	// On an unpartitioned table it does nothing and returns an empty
	// report.
	MaintainPartitions(ctx context.Context, p PartitionPolicy) (PartitionReport, error)
	// Partitions lists the table's partitions, oldest first, with row
	// counts by status.
	Partitions(ctx context.Context) ([]PartitionInfo, error)
}

// PartitionPolicy is what MaintainPartitions keeps to.
type PartitionPolicy struct {
	// Ahead is how far past now partitions must already exist.
	Ahead time.Duration
	// DeliveredRetention and DeadRetention are how long DELIVERED and
	// DEAD rows are kept; a negative value keeps them forever (and so
	// every partition that holds one).
	DeliveredRetention time.Duration
	DeadRetention      time.Duration
}

// PartitionReport says what one MaintainPartitions call did.
type PartitionReport struct {
	// Created and Dropped name the partitions created and dropped.
	Created []string
	Dropped []string
	// DroppedRows counts the rows the dropped partitions held, by status.
	DroppedRows map[string]int64
	// Kept lists expired partitions (their time range ended longer ago
	// than the shorter retention, so that their rows could all have
	// expired) that could not be dropped yet, with why.
	Kept []KeptPartition
}

// KeptPartition is an expired partition MaintainPartitions had to keep.
type KeptPartition struct {
	Name   string
	Reason string // e.g. "holds 3 PENDING rows"
}

// PartitionInfo describes one partition.
type PartitionInfo struct {
	Name     string
	From, To time.Time // the created_at range [From, To); zero for a default partition
	// Rows counts the partition's rows by status.
	Rows map[string]int64
	// Bytes is the partition's size on disk, indexes included.
	Bytes int64
}

// PartitionMigrator is offered by a storage that can create its table
// partitioned by time, for `relay-cli migrate --partition-by`. It is
// separate from Partitioner so that code which only maintains partitions
// (and its test doubles) need not create tables.
type PartitionMigrator interface {
	// MigratePartitioned is Migrate for a table partitioned by by ("day"
	// or "hour"): it creates the table partitioned where missing, with a
	// default partition and the partitions of the next few periods. On a
	// table that exists unpartitioned, or partitioned otherwise, it fails
	// and changes nothing.
	MigratePartitioned(ctx context.Context, by string, opts MigrateOptions) (MigrateResult, error)
	// PartitionedSchemaSQL is the DDL MigratePartitioned applies.
	PartitionedSchemaSQL(by string) string
}

// PartitionBy lists the values Partitioning and MigratePartitioned know.
var PartitionBy = []string{"day", "hour"}
