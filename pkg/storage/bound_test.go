package storage_test

import (
	"testing"
	"time"

	"github.com/outbox-relay/relay/pkg/storage"
)

// Beside a streaming log reader the bound is exact whatever the
// storage's; with none streaming, the storage's holds.
func TestClaimBoundBesideLog(t *testing.T) {
	timed := storage.ClaimBound{LateCommitWait: 10 * time.Second, Why: "a cursor", Fix: "CAPTURE=binlog"}
	if b := timed.BesideLog(true); !b.Exact || b.LateCommitWait != 0 {
		t.Fatalf("streaming: %+v, want exact", b)
	}
	if b := timed.BesideLog(false); b != timed {
		t.Fatalf("not streaming: %+v, want the storage's %+v", b, timed)
	}
}
