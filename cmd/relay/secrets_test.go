package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/relay/internal/eventually"
	"github.com/outbox-relay/relay/internal/harness/mysqltest"
	"github.com/outbox-relay/relay/internal/harness/pgtest"
	"github.com/outbox-relay/relay/internal/syncbuf"
)

// TestNoSecretInAnyOutput runs the relay with a recognisable password in
// both URLs (on PostgreSQL, and on MySQL with a user that has it), against brokers that refuse it or are not there, so every
// error path that might quote a URL is taken, and reads every output: the
// log, /healthz, /readyz, /stats and /metrics. The webhook driver also
// reads a signing secret from the environment variable its URL names and
// carries the password in a header option; neither may show.
func TestNoSecretInAnyOutput(t *testing.T) {
	t.Parallel()
	const password = "Zq9SecretPassw0rd"
	keyText := "Zq9SigningKeyZq9SigningKeyZq9Sig" // 32 bytes
	signingSecret := "whsec_" + base64.StdEncoding.EncodeToString([]byte(keyText))
	tb := pgtest.New(t)
	storageURL := strings.Replace(pgtest.URL(), "postgres@", "postgres:"+password+"@", 1) // trust auth ignores it
	my := mysqltest.New(t)
	// Nothing listens on port 1: every publish and health check fails.
	const webhook = "https://relay:" + password + "@127.0.0.1:1/hooks/{event_type}?secret_env=WEBHOOK_SECRET&timeout=1s" +
		"&header=X-Api-Key:" + password + "&query=code=" + password
	runs := map[string]struct{ storageURL, table, publisherURL string }{
		"nats":    {storageURL, tb.Name, "nats://relay:" + password + "@127.0.0.1:1?timeout=1s"},
		"kafka":   {storageURL, tb.Name, "kafka://relay:" + password + "@127.0.0.1:1?sasl=scram-sha-512&timeout=1s"},
		"amqp":    {storageURL, tb.Name, "amqp://relay:" + password + "@127.0.0.1:5672/?timeout=2s"},        // RabbitMQ refuses the login
		"redis":   {storageURL, tb.Name, "redis://relay:" + password + "@127.0.0.1:6379/0?dial_timeout=2s"}, // no such ACL user: WRONGPASS
		"webhook": {storageURL, tb.Name, webhook},
		"mysql":   {my.UserURL(t, password), my.Name, "nats://relay:" + password + "@127.0.0.1:1?timeout=1s"},
	}
	for name, c := range runs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			addr := freeAddr(t)
			var logs syncbuf.Buffer
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan int, 1)
			go func() {
				done <- run(ctx, nil, map[string]string{
					"STORAGE_URL":        c.storageURL,
					"STORAGE_TABLE_NAME": c.table,
					"PUBLISHER_URL":      c.publisherURL,
					"HTTP_ADDR":          addr,
					"LOG_LEVEL":          "debug",
					"BACKLOG_INTERVAL":   "100ms",
					"WEBHOOK_SECRET":     signingSecret,
				}, io.Discard, &logs)
			}()
			// Something to fail to publish.
			if name == "mysql" {
				my.InsertN(t, 5, "secret.event")
			} else {
				tb.InsertN(t, 5, "secret.event")
			}

			bodies := map[string]string{}
			eventually.True(t, 30*time.Second, func() bool {
				for _, path := range []string{"/healthz", "/readyz", "/stats", "/metrics"} {
					resp, err := http.Get("http://" + addr + path)
					if err != nil {
						return false
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					bodies[path] = string(b)
				}
				// Wait until publishing was tried and failed, pausing the
				// engine, so the publish error paths have run too.
				return strings.Contains(bodies["/readyz"], `"engine":"paused"`)
			}, func() string {
				return fmt.Sprintf("a failed broker check; log:\n%s\nreadyz: %s", logs.String(), bodies["/readyz"])
			})
			cancel()
			if code := <-done; code != 0 {
				t.Errorf("exit code %d after cancel, want 0", code)
			}

			outputs := map[string]string{"log": logs.String()}
			for path, body := range bodies {
				outputs[path] = body
			}
			for where, text := range outputs {
				for _, secret := range []string{password, signingSecret, signingSecret[len("whsec_"):], keyText} {
					if strings.Contains(text, secret) {
						t.Errorf("%s contains the secret %q:\n%s", where, secret, text)
					}
				}
			}
		})
	}
}
