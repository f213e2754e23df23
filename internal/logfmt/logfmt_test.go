package logfmt

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
	"time"
)

// Durations, also in groups, are written as Go writes them; other values
// are left as they are.
func TestReplaceAttrWritesDurationsReadably(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{ReplaceAttr: ReplaceAttr}))
	log.Info("x", "poll_interval", 500*time.Millisecond, "n", 3, slog.Group("g", "wait", 90*time.Second))
	var got struct {
		PollInterval any `json:"poll_interval"`
		N            any `json:"n"`
		G            struct {
			Wait any `json:"wait"`
		} `json:"g"`
	}
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.PollInterval != "500ms" || got.G.Wait != "1m30s" || got.N != float64(3) {
		t.Errorf("logged %s, want poll_interval 500ms, g.wait 1m30s and n 3", buf.String())
	}
}
