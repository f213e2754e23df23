# Outbox Relay. `make demo` shows it working; `make test` is what CI runs.

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
GO      ?= go
EVENTS  ?= 100000
BENCHTIME ?= 3x

.PHONY: all build run demo test services lint bench clean

all: build

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/relay ./cmd/relay
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/relay-cli ./cmd/relay-cli

# Runs the relay against the local database with the environment's settings
# (defaults: local PostgreSQL, stdout publisher), migrating the table first.
run: build
	STORAGE_AUTO_MIGRATE=$${STORAGE_AUTO_MIGRATE:-true} LOG_FORMAT=$${LOG_FORMAT:-text} ./bin/relay

demo: build
	scripts/demo.sh

# Starts PostgreSQL and RabbitMQ when nothing answers on their ports (NATS
# and Kafka run inside the tests), then runs every test with the race
# detector.
test: services
	$(GO) test -race -count=1 ./...

services:
	scripts/services.sh postgres rabbitmq

GOLANGCI_VERSION := v2.15.0
GOLANGCI := $(shell $(GO) env GOPATH)/bin/golangci-lint

# go vet and gofmt always; golangci-lint (installed on first use) when it
# installs cleanly on this machine.
lint:
	$(GO) vet ./...
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@if [ -x $(GOLANGCI) ] || $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_VERSION); then \
		$(GOLANGCI) run ./...; \
	else echo "golangci-lint did not install; skipped"; fi

# Drains EVENTS pending 200-byte events into an in-process JetStream server
# (or BENCH_NATS_URL) and into null:// (the storage side alone); prints events/s.
bench: services
	$(GO) test -run '^$$' -bench 'Drain(NATS|Null)$$' -benchtime $(BENCHTIME) ./pkg/relay -events $(EVENTS)

clean:
	rm -rf bin relay-demo.log
