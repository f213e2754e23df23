package mysql

import (
	"context"
	"database/sql/driver"
	"errors"
	"sync/atomic"

	"github.com/go-sql-driver/mysql"
)

// A connection keeps what its session took at login for as long as it
// lives: the account's MAX_STATEMENT_TIME (MariaDB's ALTER USER … WITH
// MAX_STATEMENT_TIME), the server's global max_statement_time,
// max_execution_time, innodb_lock_wait_timeout and transaction_read_only
// as they were then. A DBA who corrects one of them expects the relay to
// recover at its next attempt, not when its pooled connections go idle for
// long enough to be closed. So when a statement fails with an error such a
// setting causes, every pooled connection is retired (recycle), and the
// next statement logs in again.

// sessionErrors are the MySQL and MariaDB error numbers with which a
// statement fails on a healthy connection because of a setting its session
// took at login. They have other causes too (a lock held for long, a
// server turned read-only by a failover); a recycle then costs one round
// of logins, no more.
var sessionErrors = map[uint16]string{
	1969:               "ER_STATEMENT_TIMEOUT",                     // MariaDB: max_statement_time
	3024:               "ER_QUERY_TIMEOUT",                         // MySQL: max_execution_time
	errLockWaitTimeout: "ER_LOCK_WAIT_TIMEOUT",                     // innodb_lock_wait_timeout
	1792:               "ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION", // transaction_read_only
	1290:               "ER_OPTION_PREVENTS_STATEMENT",             // read_only: a replica, or a primary demoted
}

// recycle retires every pooled connection when err may come from a setting
// of the connection's session: those in use are closed when they are put
// back, idle ones when they are next taken.
func (s *Store) recycle(err error) {
	var myErr *mysql.MySQLError
	if errors.As(err, &myErr) && sessionErrors[myErr.Number] != "" {
		s.generation.Add(1)
	}
}

// sessionConnector sets up each new connection: READ COMMITTED, so that a
// claim locks only the rows it reads (REPEATABLE READ's gap locks deadlock
// concurrent claimers), and nothing else changes for the connection's
// life. It stamps each connection with the generation it was made in.
type sessionConnector struct {
	driver.Connector
	generation *atomic.Uint64
}

func (c sessionConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	execer, ok := conn.(driver.ExecerContext)
	if !ok {
		_ = conn.Close()
		return nil, errors.New("mysql: the connection cannot execute statements")
	}
	if _, err := execer.ExecContext(ctx, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED", nil); err != nil {
		_ = conn.Close()
		return nil, err
	}
	full, ok := conn.(fullConn)
	if !ok {
		_ = conn.Close()
		return nil, errors.New("mysql: the driver's connection lacks a method the relay needs")
	}
	return generationConn{fullConn: full, made: c.generation.Load(), current: c.generation}, nil
}

// fullConn is every interface go-sql-driver's connection implements that
// database/sql looks for, so that wrapping it hides none of them.
type fullConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
	driver.NamedValueChecker
}

// generationConn is a connection that database/sql discards once the store
// has recycled since it was made: when it is put back (IsValid) or taken
// from the idle ones (ResetSession, whose driver.ErrBadConn makes
// database/sql close it and take another).
type generationConn struct {
	fullConn
	made    uint64
	current *atomic.Uint64
}

func (c generationConn) retired() bool { return c.made != c.current.Load() }

func (c generationConn) IsValid() bool {
	return !c.retired() && c.fullConn.IsValid()
}

func (c generationConn) ResetSession(ctx context.Context) error {
	if c.retired() {
		return driver.ErrBadConn
	}
	return c.fullConn.ResetSession(ctx)
}
