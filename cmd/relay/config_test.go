package main

import "testing"

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
