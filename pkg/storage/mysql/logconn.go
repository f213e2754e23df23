package mysql

import "github.com/go-sql-driver/mysql"

// What a binlog reader (pkg/capture/binlog) needs of the store to read
// the same table's log as the same user.

// ConnConfig is a copy of the store's connection settings: address, user,
// password and TLS.
func (s *Store) ConnConfig() *mysql.Config { return s.cfg.Clone() }

// TableName is the outbox table's name, without its database.
func (s *Store) TableName() string { return s.table.Name }
