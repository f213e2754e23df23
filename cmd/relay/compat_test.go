package main

import (
	"strings"
	"testing"
)

func TestOpenOutboxSettingsAreTranslated(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name          string
		env           map[string]string
		wantPublisher string
		wantHTTP      string
		wantNote      string
	}{
		{"kafka without a scheme", map[string]string{"PUBLISHER_TYPE": "kafka", "PUBLISHER_URL": "b1:9092,b2:9092",
			"KAFKA_REQUIRED_ACKS": "one", "KAFKA_COMPRESSION": "snappy", "KAFKA_BATCH_BYTES": "1048576", "KAFKA_WRITE_TIMEOUT": "7s"},
			"kafka://b1:9092,b2:9092?acks=one&batch_bytes=1048576&compression=snappy&timeout=7s", ":8080", "PUBLISHER_TYPE"},
		{"nats publish timeout", map[string]string{"PUBLISHER_TYPE": "nats", "PUBLISHER_URL": "nats://n:4222", "NATS_PUBLISH_TIMEOUT": "3s"},
			"nats://n:4222?timeout=3s", ":8080", "timeout=3s"},
		{"the URL's own option wins", map[string]string{"PUBLISHER_URL": "nats://n:4222?timeout=9s", "NATS_PUBLISH_TIMEOUT": "3s"},
			"nats://n:4222?timeout=9s", ":8080", "NATS_PUBLISH_TIMEOUT ignored"},
		{"kafka options do not reach nats", map[string]string{"PUBLISHER_URL": "nats://n:4222", "KAFKA_COMPRESSION": "gzip"},
			"nats://n:4222", ":8080", ""},
		{"stdout by type alone", map[string]string{"PUBLISHER_TYPE": "stdout"}, "stdout://", ":8080", ""},
		{"server port", map[string]string{"SERVER_PORT": "9090", "PUBLISHER_URL": "stdout://"}, "stdout://", ":9090", "HTTP_ADDR=:9090"},
		{"HTTP_ADDR wins over SERVER_PORT", map[string]string{"SERVER_PORT": ":9090", "HTTP_ADDR": "127.0.0.1:7070", "PUBLISHER_URL": "stdout://"}, "stdout://", "127.0.0.1:7070", ""},
		{"async kafka is refused quietly", map[string]string{"PUBLISHER_URL": "kafka://b:9092", "KAFKA_ASYNC": "true"},
			"kafka://b:9092", ":8080", "KAFKA_ASYNC=true ignored"},
		{"ignored settings", map[string]string{"ENVIRONMENT": "development", "PUBLISHER_URL": "stdout://"}, "stdout://", ":8080", "ENVIRONMENT ignored"},
		{"storage type agreeing with the URL", map[string]string{"STORAGE_TYPE": "mysql", "STORAGE_URL": "mysql://relay@db:3306/app", "PUBLISHER_URL": "stdout://"},
			"stdout://", ":8080", "STORAGE_TYPE is implied by STORAGE_URL's scheme"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := loadConfig(c.env)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.PublisherURL != c.wantPublisher || cfg.HTTPAddr != c.wantHTTP {
				t.Errorf("PUBLISHER_URL %q, HTTP_ADDR %q; want %q, %q", cfg.PublisherURL, cfg.HTTPAddr, c.wantPublisher, c.wantHTTP)
			}
			notes := strings.Join(cfg.notes, "\n")
			if c.wantNote != "" && !strings.Contains(notes, c.wantNote) {
				t.Errorf("notes %q do not mention %q", notes, c.wantNote)
			}
		})
	}
}

func TestOpenOutboxSettingsThatCannotWorkExit2(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"redis", map[string]string{"PUBLISHER_TYPE": "redis", "PUBLISHER_URL": "redis://r:6379"}, "PUBLISHER_TYPE"},
		{"mysql type, postgres URL", map[string]string{"STORAGE_TYPE": "mysql"}, "STORAGE_TYPE=mysql contradicts STORAGE_URL's scheme \"postgres\""},
		{"unknown storage type", map[string]string{"STORAGE_TYPE": "mongodb"}, "STORAGE_TYPE=\"mongodb\" is not supported here (postgres, mysql)"},
		{"type contradicts URL", map[string]string{"PUBLISHER_TYPE": "kafka", "PUBLISHER_URL": "nats://n:4222"}, "contradicts"},
		{"type without URL", map[string]string{"PUBLISHER_TYPE": "nats"}, "needs PUBLISHER_URL"},
		{"bad acks", map[string]string{"PUBLISHER_URL": "kafka://b:9092", "KAFKA_REQUIRED_ACKS": "some"}, "KAFKA_REQUIRED_ACKS"},
		{"bad timeout", map[string]string{"PUBLISHER_URL": "nats://n:4222", "NATS_PUBLISH_TIMEOUT": "soon"}, "NATS_PUBLISH_TIMEOUT"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, stderr := runRelay(t, c.env)
			if code != 2 || !strings.Contains(stderr, c.want) {
				t.Fatalf("exit %d, stderr %q; want 2 naming %s", code, stderr, c.want)
			}
		})
	}
}
