package redis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/outbox-relay/relay/pkg/publisher"
)

// serverError is a reply error as Redis sends it: go-redis recognises Redis
// errors by their RedisError method and their text.
type serverError string

func (e serverError) Error() string { return string(e) }
func (serverError) RedisError()     {}

// TestClassify covers the replies a test server cannot easily be made to
// give (LOADING, MASTERDOWN, a cluster's); redis_test.go provokes the others
// on real servers.
func TestClassify(t *testing.T) {
	t.Parallel()
	p := &Publisher{cfg: Config{Addr: "r:6379", StreamPrefix: "app:"}}
	const (
		permanent   = "permanent"
		unavailable = "unavailable"
		retryable   = "retryable"
	)
	cases := []struct {
		err  error
		want string
	}{
		{serverError("WRONGTYPE Operation against a key holding the wrong kind of value"), permanent},
		{serverError("ERR Elements are too large to be stored"), permanent},
		{serverError("LOADING Redis is loading the dataset in memory"), unavailable},
		{serverError("READONLY You can't write against a read only replica."), unavailable},
		{serverError("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), unavailable},
		{serverError("OOM command not allowed when used memory > 'maxmemory'."), unavailable},
		{serverError("NOREPLICAS Not enough good replicas to write."), unavailable},
		{serverError("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."), unavailable},
		{serverError("MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk."), unavailable},
		{serverError("CLUSTERDOWN The cluster is down"), unavailable},
		{serverError("TRYAGAIN Multiple keys request during rehashing of slot"), unavailable},
		{serverError("MOVED 3999 127.0.0.1:6381"), unavailable},
		{serverError("ASK 3999 127.0.0.1:6381"), unavailable},
		{serverError("ERR max number of clients reached"), unavailable},
		{serverError("NOAUTH Authentication required."), unavailable},
		{serverError("WRONGPASS invalid username-password pair or user is disabled."), unavailable},
		{fmt.Errorf("failed to authenticate: %w", serverError("WRONGPASS invalid username-password pair or user is disabled.")), unavailable},
		{serverError("NOPERM this user has no permissions to run the 'xadd' command"), unavailable},
		{serverError("NOPERM User relay has no permissions to run the 'xadd' command"), unavailable},
		{serverError("NOPERM this user has no permissions to access one of the keys used as arguments"), retryable},
		{serverError("NOPERM No permissions to access a key"), retryable},
		{serverError("ERR The stream has exhausted the last possible ID, unable to add more items"), retryable},
		{io.EOF, unavailable},
		{io.ErrUnexpectedEOF, unavailable},
		{&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, unavailable},
		{&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, unavailable},
		{context.DeadlineExceeded, unavailable},
		{context.Canceled, unavailable},
		{goredis.ErrPoolTimeout, unavailable},
		{goredis.ErrClosed, unavailable},
	}
	for _, tc := range cases {
		err := p.classify(tc.err, "app:orders")
		got := retryable
		switch {
		case publisher.IsPermanent(err) && publisher.IsUnavailable(err):
			got = "both"
		case publisher.IsPermanent(err):
			got = permanent
		case publisher.IsUnavailable(err):
			got = unavailable
		}
		if got != tc.want {
			t.Errorf("%v: classified %s (%v), want %s", tc.err, got, err, tc.want)
		}
		if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.err.Error()) {
			t.Errorf("%v: %q neither wraps nor quotes the cause", tc.err, err)
		}
	}
}
