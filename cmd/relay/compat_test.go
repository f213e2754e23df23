package main

import (
	"reflect"
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
		wantNoNote    string // a claim that would be wrong here
	}{
		{"kafka without a scheme", map[string]string{"PUBLISHER_TYPE": "kafka", "PUBLISHER_URL": "b1:9092,b2:9092",
			"KAFKA_REQUIRED_ACKS": "one", "KAFKA_COMPRESSION": "snappy", "KAFKA_BATCH_BYTES": "1048576", "KAFKA_WRITE_TIMEOUT": "7s"},
			"kafka://b1:9092,b2:9092?acks=one&batch_bytes=1048576&compression=snappy&timeout=7s", ":8080",
			"PUBLISHER_TYPE=kafka completed PUBLISHER_URL, which has no scheme, as kafka://…", "PUBLISHER_TYPE=kafka can be removed"},
		{"type that matches the URL", map[string]string{"PUBLISHER_TYPE": "rabbitmq", "PUBLISHER_URL": "amqps://u:p@h/"},
			"amqps://u:p@h/", ":8080", "PUBLISHER_TYPE=rabbitmq can be removed: PUBLISHER_URL's scheme amqps:// selects the driver", "completed"},
		{"nats publish timeout", map[string]string{"PUBLISHER_TYPE": "nats", "PUBLISHER_URL": "nats://n:4222", "NATS_PUBLISH_TIMEOUT": "3s"},
			"nats://n:4222?timeout=3s", ":8080", "NATS_PUBLISH_TIMEOUT used as PUBLISHER_URL option timeout=3s", ""},
		// The driver reads durations as internal/duration does, so the
		// variable that becomes its option reads the same.
		{"nats publish timeout in days", map[string]string{"PUBLISHER_URL": "nats://n:4222", "NATS_PUBLISH_TIMEOUT": "1d"},
			"nats://n:4222?timeout=1d", ":8080", "NATS_PUBLISH_TIMEOUT used as PUBLISHER_URL option timeout=1d", ""},
		{"the URL's own option wins", map[string]string{"PUBLISHER_URL": "nats://n:4222?timeout=9s", "NATS_PUBLISH_TIMEOUT": "3s"},
			"nats://n:4222?timeout=9s", ":8080", "NATS_PUBLISH_TIMEOUT ignored: PUBLISHER_URL sets timeout", "used as"},
		{"kafka options do not reach nats", map[string]string{"PUBLISHER_URL": "nats://n:4222", "KAFKA_COMPRESSION": "gzip"},
			"nats://n:4222", ":8080", "KAFKA_COMPRESSION ignored: it is an option of another broker's driver, and PUBLISHER_URL is nats://…", ""},
		{"nats options do not reach kafka", map[string]string{"PUBLISHER_URL": "kafka://b:9092", "NATS_PUBLISH_TIMEOUT": "3s"},
			"kafka://b:9092", ":8080", "NATS_PUBLISH_TIMEOUT ignored: it is an option of another broker's driver, and PUBLISHER_URL is kafka://…", ""},
		{"stdout by type alone", map[string]string{"PUBLISHER_TYPE": "stdout"}, "stdout://", ":8080",
			"PUBLISHER_TYPE=stdout used as PUBLISHER_URL=stdout://", ""},
		{"server port", map[string]string{"SERVER_PORT": "9090", "PUBLISHER_URL": "stdout://"}, "stdout://", ":9090", "SERVER_PORT used as HTTP_ADDR=:9090", ""},
		{"HTTP_ADDR wins over SERVER_PORT", map[string]string{"SERVER_PORT": ":9090", "HTTP_ADDR": "127.0.0.1:7070", "PUBLISHER_URL": "stdout://"}, "stdout://", "127.0.0.1:7070",
			"SERVER_PORT ignored: HTTP_ADDR is set", "used as"},
		{"storage type", map[string]string{"STORAGE_TYPE": "postgresql", "PUBLISHER_URL": "stdout://"}, "stdout://", ":8080",
			"STORAGE_TYPE is implied by STORAGE_URL's scheme; it can be removed", ""},
		{"async kafka is refused quietly", map[string]string{"PUBLISHER_URL": "kafka://b:9092", "KAFKA_ASYNC": "true"},
			"kafka://b:9092", ":8080", "KAFKA_ASYNC=true ignored: the relay always waits", ""},
		{"synchronous kafka is what the relay does", map[string]string{"PUBLISHER_URL": "kafka://b:9092", "KAFKA_ASYNC": "false"},
			"kafka://b:9092", ":8080", "KAFKA_ASYNC=false can be removed", ""},
		{"kafka async on nats", map[string]string{"PUBLISHER_URL": "nats://n:4222", "KAFKA_ASYNC": "true"},
			"nats://n:4222", ":8080", "KAFKA_ASYNC ignored: it is an option of the Kafka driver, and PUBLISHER_URL is nats://…", ""},
		{"ignored settings", map[string]string{"ENVIRONMENT": "development", "PUBLISHER_URL": "stdout://"}, "stdout://", ":8080", "ENVIRONMENT ignored: this relay behaves the same everywhere", ""},
		{"kafka retries", map[string]string{"PUBLISHER_URL": "kafka://b:9092", "KAFKA_MAX_ATTEMPTS": "3"}, "kafka://b:9092", ":8080",
			"KAFKA_MAX_ATTEMPTS ignored: failed events are retried per event (RETRY_MAX_ATTEMPTS", ""},
		{"redis timeouts", map[string]string{"PUBLISHER_TYPE": "redis", "PUBLISHER_URL": "redis://:pw@r:6379/0",
			"REDIS_CONNECTION_TIMEOUT": "3s", "REDIS_WRITE_TIMEOUT": "1s"},
			"redis://:pw@r:6379/0?dial_timeout=3s&read_timeout=1s&write_timeout=1s", ":8080", "REDIS_WRITE_TIMEOUT used as PUBLISHER_URL option write_timeout=1s and read_timeout=1s", ""},
		{"redis with TLS", map[string]string{"PUBLISHER_TYPE": "redis", "PUBLISHER_URL": "rediss://r:6380", "REDIS_CONNECTION_TIMEOUT": "2s"},
			"rediss://r:6380?dial_timeout=2s", ":8080", "dial_timeout=2s", ""},
		{"redis URL's own timeout wins", map[string]string{"PUBLISHER_URL": "redis://r?write_timeout=9s", "REDIS_WRITE_TIMEOUT": "1s"},
			"redis://r?read_timeout=1s&write_timeout=9s", ":8080", "REDIS_WRITE_TIMEOUT used as PUBLISHER_URL option read_timeout=1s; PUBLISHER_URL sets write_timeout itself", ""},
		{"redis options do not reach kafka", map[string]string{"PUBLISHER_URL": "kafka://b:9092", "REDIS_WRITE_TIMEOUT": "1s"},
			"kafka://b:9092", ":8080", "REDIS_WRITE_TIMEOUT ignored: it is an option of another broker's driver, and PUBLISHER_URL is kafka://…", "used as"},
		{"storage type agreeing with the URL", map[string]string{"STORAGE_TYPE": "mysql", "STORAGE_URL": "mysql://relay@db:3306/app", "PUBLISHER_URL": "stdout://"},
			"stdout://", ":8080", "STORAGE_TYPE is implied by STORAGE_URL's scheme", ""},
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
			if !strings.Contains(notes, c.wantNote) {
				t.Errorf("notes %q do not say %q", notes, c.wantNote)
			}
			if c.wantNoNote != "" && strings.Contains(notes, c.wantNoNote) {
				t.Errorf("notes %q say %q, which is wrong here", notes, c.wantNoNote)
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
		{"bad redis timeout", map[string]string{"PUBLISHER_TYPE": "redis", "PUBLISHER_URL": "redis://r:6379", "REDIS_WRITE_TIMEOUT": "1000"}, "REDIS_WRITE_TIMEOUT"},
		{"redis type contradicts URL", map[string]string{"PUBLISHER_TYPE": "redis", "PUBLISHER_URL": "nats://n:4222"}, "contradicts"},
		{"unsupported type", map[string]string{"PUBLISHER_TYPE": "sqs", "PUBLISHER_URL": "https://sqs"}, "PUBLISHER_TYPE"},
		{"mysql type, postgres URL", map[string]string{"STORAGE_TYPE": "mysql"}, "STORAGE_TYPE=mysql contradicts STORAGE_URL's scheme \"postgres\""},
		{"unknown storage type", map[string]string{"STORAGE_TYPE": "mongodb"}, "STORAGE_TYPE=\"mongodb\" is not supported here (postgres, mysql)"},
		{"type contradicts URL", map[string]string{"PUBLISHER_TYPE": "kafka", "PUBLISHER_URL": "nats://n:4222"}, "contradicts"},
		{"type without URL", map[string]string{"PUBLISHER_TYPE": "nats"}, "needs PUBLISHER_URL"},
		{"bad acks", map[string]string{"PUBLISHER_URL": "kafka://b:9092", "KAFKA_REQUIRED_ACKS": "some"}, "KAFKA_REQUIRED_ACKS"},
		{"bad timeout", map[string]string{"PUBLISHER_URL": "nats://n:4222", "NATS_PUBLISH_TIMEOUT": "soon"}, "NATS_PUBLISH_TIMEOUT"},
		{"bad async", map[string]string{"PUBLISHER_URL": "kafka://b:9092", "KAFKA_ASYNC": "sometimes"}, "KAFKA_ASYNC"},
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

// Every Open Outbox variable that is set gets exactly one note in the log,
// whichever broker PUBLISHER_URL names: used, and how, or ignored, and why.
// None quotes the URL, which can hold a password.
func TestEveryOpenOutboxSettingIsNoted(t *testing.T) {
	t.Parallel()
	samples := map[string]string{
		"STORAGE_TYPE": "postgres", "SERVER_PORT": "9090", "NATS_PUBLISH_TIMEOUT": "3s",
		"KAFKA_REQUIRED_ACKS": "all", "KAFKA_COMPRESSION": "gzip", "KAFKA_BATCH_BYTES": "1024",
		"KAFKA_WRITE_TIMEOUT": "5s", "KAFKA_ASYNC": "false",
		"ENVIRONMENT": "production", "KAFKA_BATCH_SIZE": "100", "KAFKA_BATCH_TIMEOUT": "10ms",
		"KAFKA_MAX_ATTEMPTS": "3", "KAFKA_READ_TIMEOUT": "10s",
		"REDIS_CONNECTION_TIMEOUT": "2s", "REDIS_WRITE_TIMEOUT": "1s",
	}
	var names []string
	typ := reflect.TypeOf(openOutboxConfig{})
	for i := range typ.NumField() {
		names = append(names, typ.Field(i).Tag.Get("env"))
	}
	for _, s := range ignoredOpenOutboxSettings {
		names = append(names, s.name)
	}
	const password = "pw-not-for-logs"
	publishers := map[string]string{ // PUBLISHER_TYPE: PUBLISHER_URL
		"nats": "nats://relay:" + password + "@n:4222", "kafka": "kafka://relay:" + password + "@b:9092",
		"amqp": "amqp://relay:" + password + "@r:5672/", "redis": "redis://relay:" + password + "@r:6379/0", "stdout": "stdout://",
	}
	for typeName, publisherURL := range publishers {
		for _, name := range names {
			value := samples[name]
			if name == "PUBLISHER_TYPE" {
				value = typeName
			}
			if value == "" {
				t.Fatalf("no sample value for %s: add one to this test", name)
			}
			cfg, err := loadConfig(map[string]string{"PUBLISHER_URL": publisherURL, name: value})
			if err != nil {
				t.Errorf("%s=%s with PUBLISHER_URL %s://: %v", name, value, typeName, err)
				continue
			}
			var about []string
			for _, n := range cfg.notes {
				if strings.HasPrefix(n, name+" ") || strings.HasPrefix(n, name+"=") {
					about = append(about, n)
				}
				if strings.Contains(n, password) {
					t.Errorf("a note quotes the password: %q", n)
				}
			}
			if len(about) != 1 || len(cfg.notes) != 1 {
				t.Errorf("%s=%s with PUBLISHER_URL %s://: notes %q, want one, about %s", name, value, typeName, cfg.notes, name)
			}
		}
	}
}
