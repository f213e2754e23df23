package main

import (
	"testing"
	"time"
)

func TestBrokerName(t *testing.T) {
	t.Parallel()
	for url, want := range map[string]string{
		"nats://n:4222":              "nats",
		"tls://n:4222":               "nats",
		"kafka://b:9092":             "kafka",
		"amqp://guest:guest@r:5672/": "rabbitmq",
		"AMQPS://r":                  "rabbitmq",
		"redis://r:6379/0":           "redis",
		"rediss://r":                 "redis",
		"http://hooks.example/in":    "webhook",
		"https://hooks.example/in":   "webhook",
		"stdout://":                  "stdout",
		"null://":                    "null",
		"b1:9092,b2:9092":            "",
		"":                           "",
	} {
		if got := brokerName(url); got != want {
			t.Errorf("brokerName(%q) = %q, want %q", url, got, want)
		}
	}
}

// TestShutdownBudgetAsDocumented: docs/architecture.md gives the engine
// SHUTDOWN_TIMEOUT less a fifth (at most 2 s) for closing; these are its
// examples.
func TestShutdownBudgetAsDocumented(t *testing.T) {
	t.Parallel()
	for set, engine := range map[string]time.Duration{
		"30s": 28 * time.Second,
		"2s":  1600 * time.Millisecond,
		"5m":  298 * time.Second,
	} {
		cfg, err := loadConfig(map[string]string{"PUBLISHER_URL": "null://", "SHUTDOWN_TIMEOUT": set})
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.engineConfig(nil).ShutdownTimeout; got != engine {
			t.Errorf("SHUTDOWN_TIMEOUT=%s: the engine gets %s, want %s", set, got, engine)
		}
	}
}
