package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/outbox-relay/relay/internal/harness/mysqltest"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
)

// claimBoundBody is the claim_bound of /readyz.
type claimBoundBody struct {
	ClaimBound *struct {
		Exact                 bool     `json:"exact"`
		LateCommitWaitSeconds *float64 `json:"late_commit_wait_seconds"`
		Why                   string   `json:"why"`
		Fix                   string   `json:"fix"`
	} `json:"claim_bound"`
}

func (r *liveRelay) claimBound(t *testing.T) claimBoundBody {
	t.Helper()
	_, body := r.get(t, "/readyz")
	var b claimBoundBody
	if err := json.Unmarshal(body, &b); err != nil || b.ClaimBound == nil {
		t.Fatalf("/readyz without a claim_bound (%v): %s", err, body)
	}
	return b
}

// On MySQL the claims' bound is a timing one: the relay warns at start that
// a late commit's event waits up to SWEEP_INTERVAL, as configured, plus a
// claim, and what removes the wait; /readyz reports the same bound.
func TestMySQLClaimBoundIsWarnedAndReported(t *testing.T) {
	t.Parallel()
	tb := mysqltest.New(t)
	r := startRelay(t, map[string]string{"STORAGE_URL": tb.URL, "PUBLISHER_URL": "null://", "SWEEP_INTERVAL": "7s", "LOG_FORMAT": "json"})
	var warns []string
	for _, line := range strings.Split(r.log.String(), "\n") {
		if strings.Contains(line, `"level":"WARN"`) && strings.Contains(line, "commit late") {
			warns = append(warns, line)
		}
	}
	if len(warns) != 1 {
		t.Fatalf("%d WARN lines on late commits, want 1; log:\n%s", len(warns), r.log.String())
	}
	for _, w := range []string{"wait up to SWEEP_INTERVAL (7s) plus one claim", "CAPTURE=binlog", "binary log", `"late_commit_wait":"7s"`} {
		if !strings.Contains(warns[0], w) {
			t.Errorf("the WARN line does not say %q:\n%s", w, warns[0])
		}
	}
	b := r.claimBound(t).ClaimBound
	if b.Exact || b.LateCommitWaitSeconds == nil || *b.LateCommitWaitSeconds != 7 ||
		!strings.Contains(b.Why, "sweep") || !strings.Contains(b.Fix, "CAPTURE=binlog") {
		t.Errorf("/readyz claim_bound on MySQL: %+v", *b)
	}
}

// PostgreSQL's claims go forward by transaction ids: exact, and no warning.
func TestPostgreSQLClaimBoundIsExact(t *testing.T) {
	t.Parallel()
	tb := pgtest.New(t)
	r := startRelay(t, map[string]string{"STORAGE_URL": tb.URL, "PUBLISHER_URL": "null://"})
	if log := r.log.String(); strings.Contains(log, "commit late") {
		t.Errorf("PostgreSQL warns of late commits:\n%s", log)
	}
	if b := r.claimBound(t).ClaimBound; !b.Exact || b.LateCommitWaitSeconds != nil || b.Why != "" || b.Fix != "" {
		t.Errorf("/readyz claim_bound on PostgreSQL: %+v, want exact alone", *b)
	}
}
