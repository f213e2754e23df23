package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/outbox-relay/relay/internal/harness/mysqltest"
	"github.com/outbox-relay/relay/internal/mycluster"
	"github.com/outbox-relay/relay/pkg/capture/binlog"
)

// stats shows the CAPTURE=binlog reader's saved position, the server's,
// how far behind (bytes in one file, files after a rotation), how long
// ago it was saved and whether a relay streams; the console's overview
// reads the same.
func TestStatsShowsTheBinlogPosition(t *testing.T) {
	t.Parallel()
	c := mycluster.Start(t, mycluster.Options{})
	tb := mysqltest.NewAt(t, c.URL(""))
	args := []string{"stats", "--storage-url", c.URL(tb.Database), "--table", tb.Name}
	if st := ok(t, cmd{args: args}.run(t)); strings.Contains(st.stdout, "binlog position") {
		t.Fatalf("stats of a table no reader read shows a binlog position:\n%s", st.stdout)
	}
	if out := ok(t, cmd{args: append(args, "--json")}.run(t)).stdout; strings.Contains(out, "binlog_position") {
		t.Fatalf("stats --json of a table no reader read has binlog_position:\n%s", out)
	}

	db := c.DB(t)
	cfg := binlog.Config{Conn: tb.Store.ConnConfig(), Database: tb.Store.Database(), Table: tb.Store.TableName()}
	if err := binlog.CreatePositionTable(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	rows, err := db.QueryContext(ctx, "SHOW MASTER STATUS")
	if err != nil {
		t.Fatal(err)
	}
	cols, _ := rows.Columns()
	vals := make([]any, len(cols))
	for i := range vals {
		vals[i] = new(any)
	}
	if !rows.Next() {
		t.Fatal("SHOW MASTER STATUS is empty")
	}
	if err := rows.Scan(vals...); err != nil {
		t.Fatal(err)
	}
	file := string((*vals[0].(*any)).([]byte))
	rows.Close()
	if _, err := db.ExecContext(ctx, "INSERT INTO `"+tb.Database+"`.outbox_relay_positions (outbox_table, gtid, binlog_file, binlog_pos, server, saved_at) "+
		"VALUES (?, '0-1-1', ?, 4, 'mariadb server_id=1', UTC_TIMESTAMP(6) - INTERVAL 90 SECOND)", tb.Name, file); err != nil {
		t.Fatal(err)
	}

	st := ok(t, cmd{args: args}.run(t)).stdout
	for _, w := range []string{
		"binlog position (CAPTURE=binlog, in outbox_relay_positions): no relay streams (nobody holds lock " + binlog.LockName(tb.Store.Database(), tb.Store.TableName()),
		"saved gtid 0-1-1 (" + file + ":4) at ", ", 1m3", "ago (lag)",
		"server at gtid 0-", " behind",
	} {
		if !strings.Contains(st, w) {
			t.Errorf("stats lacks %q:\n%s", w, st)
		}
	}
	type pos struct {
		GTID string `json:"gtid"`
		File string `json:"file"`
		Pos  uint32 `json:"pos"`
	}
	type position struct {
		PositionTable  string  `json:"position_table"`
		Lock           string  `json:"lock"`
		Active         bool    `json:"active"`
		Saved          pos     `json:"saved"`
		Server         string  `json:"server"`
		ServerPosition *pos    `json:"server_position"`
		BehindBytes    int64   `json:"behind_bytes"`
		BehindFiles    int     `json:"behind_files"`
		LagSeconds     float64 `json:"lag_seconds"`
	}
	var exact bool // stats' claim_bound.exact, as read with the position
	read := func() position {
		t.Helper()
		v := decode[struct {
			BinlogPosition *position `json:"binlog_position"`
			ClaimBound     struct {
				Exact bool `json:"exact"`
			} `json:"claim_bound"`
		}](t, ok(t, cmd{args: append(args, "--json")}.run(t)))
		if v.BinlogPosition == nil {
			t.Fatal("stats --json has no binlog_position")
		}
		exact = v.ClaimBound.Exact
		return *v.BinlogPosition
	}
	j := read()
	if exact {
		t.Error("stats says the claims are exact while no binlog reader streams: polling's bound holds")
	}
	if j.Active || j.PositionTable != "outbox_relay_positions" || j.Saved != (pos{"0-1-1", file, 4}) || j.Server != "mariadb server_id=1" ||
		j.ServerPosition == nil || j.ServerPosition.File != file || j.BehindFiles != 0 || j.BehindBytes != int64(j.ServerPosition.Pos-4) ||
		j.LagSeconds < 90 || j.LagSeconds > 150 {
		b, _ := json.Marshal(j)
		t.Fatalf("stats --json binlog_position: %s", b)
	}

	// A reader holds the lock: a relay streams.
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SELECT GET_LOCK(?, 0)", j.Lock); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "FLUSH BINARY LOGS"); err != nil {
		t.Fatal(err)
	}
	if j = read(); !j.Active || j.BehindFiles != 1 || j.BehindBytes != 0 {
		b, _ := json.Marshal(j)
		t.Fatalf("stats --json with the lock held, after a rotation: %s", b)
	}
	if !exact {
		t.Error("stats says the claims are not exact while a binlog reader streams: the log brings every event at its commit")
	}
	if st := ok(t, cmd{args: args}.run(t)).stdout; !strings.Contains(st, "a relay streams (holds lock") || !strings.Contains(st, ": 1 file behind") {
		t.Errorf("stats with the lock held, after a rotation:\n%s", st)
	}

	// The console's overview reads the same.
	overview := consoleOverview(t, cmd{args: []string{"console", "--addr", "127.0.0.1:0", "--storage-url", c.URL(tb.Database), "--table", tb.Name}})
	for _, w := range []string{`id="binlog-position"`, "1 file", "a relay streams", "saved gtid 0-1-1 (" + file + ":4)"} {
		if !strings.Contains(overview, w) {
			t.Errorf("the console's overview lacks %q:\n%s", w, overview)
		}
	}
}

// consoleOverview starts c, a console on a loopback address, and returns
// its overview page.
func consoleOverview(t *testing.T, c cmd) string {
	t.Helper()
	x, cancel := c.start(t)
	defer cancel()
	stderr, err := x.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = x.Process.Signal(os.Interrupt)
		_ = x.Wait()
	}()
	lines := bufio.NewScanner(stderr)
	var addr string
	for addr == "" && lines.Scan() {
		var entry struct{ Msg, Addr string }
		if json.Unmarshal(lines.Bytes(), &entry) == nil && entry.Msg == "console: listening" {
			addr = entry.Addr
		}
	}
	if addr == "" {
		t.Fatalf("no listening line on stderr (%v)", lines.Err())
	}
	go func() {
		for lines.Scan() {
		}
	}()
	resp, err := http.Get(addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET / = %d (%v):\n%s", resp.StatusCode, err, body)
	}
	return string(body)
}
