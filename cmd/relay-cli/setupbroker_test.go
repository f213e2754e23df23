package main

import (
	"strings"
	"testing"

	"github.com/outbox-relay/relay/internal/harness/natstest"
)

// setup-broker creates the JetStream stream through the NATS driver, says
// so, and on a second run counts what the stream holds; without the broker
// or the event types it exits 2 naming the fix, and a broker that needs
// nothing created says so.
func TestSetupBroker(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	env := []string{"PUBLISHER_URL=" + srv.URL()}
	r := ok(t, cmd{args: []string{"setup-broker", "--event-type", "orders.>"}, env: env}.run(t))
	if want := "created  stream OUTBOX  subjects orders.>, duplicate window 2m0s, 0 messages\n"; r.stdout != want {
		t.Errorf("stdout %q, want %q", r.stdout, want)
	}
	r = ok(t, cmd{args: []string{"setup-broker", "--event-type", "orders.>", "--json"}, env: env}.run(t))
	got := decode[[]map[string]string](t, r)
	if len(got) != 1 || got[0]["action"] != "exists" || got[0]["kind"] != "stream" || got[0]["name"] != "OUTBOX" {
		t.Errorf("--json %v, want the stream as it was", got)
	}

	for _, c := range []struct {
		args []string
		env  []string
		want string
	}{
		{[]string{"setup-broker", "--event-type", "x"}, nil, "set PUBLISHER_URL"},
		{[]string{"setup-broker"}, env, "pass --event-type"},
		{[]string{"setup-broker", "--event-type", "x", "--publisher-url", "rabbitmq://guest:" + secret + "@127.0.0.1/"}, nil, "did you mean amqp://?"},
	} {
		r := cmd{args: c.args, env: c.env}.run(t)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) || strings.Contains(r.stderr, secret) {
			t.Errorf("%v: want exit 2 saying %q without the password:\n%s", c.args, c.want, r)
		}
	}
	r = ok(t, cmd{args: []string{"setup-broker", "--event-type", "x", "--publisher-url", "redis://127.0.0.1:6379"}}.run(t))
	if !strings.Contains(r.stderr, "needs nothing created") {
		t.Errorf("redis:// does not say it needs nothing:\n%s", r)
	}
}
