# Outbox Relay. `make demo` shows it working; `make test` is what CI runs.

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
GO      ?= go
EVENTS  ?= 100000
BENCHTIME ?= 3x

.PHONY: all build run demo test services compose-check chaos up down lint bench clean

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

# Starts PostgreSQL, MariaDB and RabbitMQ when nothing answers on their ports (NATS
# and Kafka run inside the tests), checks docker-compose.yml, then runs every
# test with the race detector, the chaos suite included.
test: services compose-check
	$(GO) test -race -count=1 ./...

services:
	scripts/services.sh postgres mariadb rabbitmq

# docker-compose.yml must parse; no Docker engine is needed for that.
compose-check:
	scripts/services.sh docker-compose
	docker-compose config -q
	docker-compose --profile kafka --profile amqp --profile tools --profile mysql config -q

# The fault-injection suite alone, verbose: kills, outages, restarts.
chaos: services
	$(GO) test -race -count=1 -v ./internal/chaos/

# The docker-compose stack (needs a Docker engine): postgres, nats, relay,
# prometheus, grafana; PROFILES="kafka amqp" adds the other brokers, and
# PROFILES=mysql MariaDB with a relay of its own.
PROFILES ?=
COMPOSE := docker compose $(foreach p,$(PROFILES),--profile $(p))
up:
	$(COMPOSE) up -d --build
down:
	$(COMPOSE) --profile kafka --profile amqp --profile tools --profile mysql down -v

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

# Throughput (default): drains EVENTS pending 200-byte events into BROKER
# (nats, kafka or amqp; in-process NATS and Kafka, the local RabbitMQ) and
# into null:// (the storage side alone), printing events/s, and runs the
# bare claim → mark-delivered SQL loop the relay is measured against.
# STORAGE=mysql drains a MariaDB/MySQL table instead of PostgreSQL's (every
# mode but memory).
# MODE=latency: one event per transaction at 100/s, created_at → ack p50/p95/p99
# (PostgreSQL: LISTEN/NOTIFY; MySQL: POLL_INTERVAL=100ms).
# MODE=ordering: a 100-key backlog with ORDERING=partition and with none.
# MODE=memory: the relay binary drains 1,000,000 events; peak and quarterly RSS.
BROKER ?= nats
MODE ?= throughput
STORAGE ?= postgres
BENCH_BROKER = $(if $(filter kafka,$(BROKER)),Kafka,$(if $(filter amqp,$(BROKER)),AMQP,NATS))
bench: services
ifeq ($(MODE),latency)
	$(GO) test -run '^$$' -bench 'LatencyNATS$$' -benchtime 1x ./pkg/relay -storage $(STORAGE)
else ifeq ($(MODE),memory)
	$(GO) test -run '^$$' -bench 'DrainMemory$$' -benchtime 1x -timeout 60m ./cmd/relay
else ifeq ($(MODE),ordering)
	$(GO) test -run '^$$' -bench 'DrainNATS(Partition|Keyed)$$' -benchtime $(BENCHTIME) ./pkg/relay -events $(EVENTS) -storage $(STORAGE)
else
	$(GO) test -run '^$$' -bench 'Drain($(BENCH_BROKER)|Null)$$|ClaimLoop$$' -benchtime $(BENCHTIME) -timeout 60m ./pkg/relay -events $(EVENTS) -storage $(STORAGE)
endif

clean:
	rm -rf bin relay-demo.log
