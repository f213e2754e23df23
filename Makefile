# Outbox Relay. `make demo` shows it working; `make test` is what CI runs.

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null)
LDFLAGS := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)
GO      ?= go
EVENTS  ?= 100000
BENCHTIME ?= 3x
ROWS    ?= 3000000

.PHONY: all build release image test-image run demo test helm-test services compose-check chaos fuzz up down lint bench clean

all: build

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/relay ./cmd/relay
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/relay-cli ./cmd/relay-cli

# Archives of relay and relay-cli for linux and darwin on amd64 and arm64,
# stamped with VERSION and COMMIT, and their SHA-256 checksums, in dist/
# (scripts/release.sh). It publishes nothing; TARGETS="linux/amd64" builds
# fewer.
release:
	VERSION=$(VERSION) COMMIT=$(COMMIT) GO=$(GO) scripts/release.sh

# The OCI image, built offline from the release's static linux binaries by
# tools/image (no Docker engine, no base image): the Dockerfile's layout,
# user 65532, OCI labels, CA certificates, no shell, and the same digest for
# the same commit. It writes dist/outbox-relay_<version>_linux_<arch>.oci.tar
# (`podman load -i` reads it) and a CycloneDX SBOM of each binary beside it
# (scripts/image.sh). IMAGE_ARCH=arm64 builds another architecture.
IMAGE_ARCH ?= $(shell $(GO) env GOARCH)
IMAGE_ARCHIVE = dist/outbox-relay_$(patsubst v%,%,$(VERSION))_linux_$(IMAGE_ARCH).oci.tar
image:
	VERSION=$(VERSION) COMMIT=$(COMMIT) GO=$(GO) IMAGE_ARCH=$(IMAGE_ARCH) scripts/image.sh

# Builds the image, checks its files and config (and that the Dockerfile
# describes the same image, and that two builds give one digest), then runs
# it with podman (installed from Debian packages when missing, with runc;
# see tools/image/run_test.go): `/app/cli migrate` against the local
# PostgreSQL in a database of its own, the relay draining events into the
# local NATS, /readyz, SIGTERM -> exit 0, uid 65532 and a read-only root
# filesystem. Without podman, or root to install it, the run test skips,
# saying why. Not part of make test (about a minute more, cold); .ci/run
# runs it after make test.
test-image: image
	@a=$$(sha256sum <$(IMAGE_ARCHIVE)); \
	$(MAKE) --no-print-directory image VERSION=$(VERSION) COMMIT=$(COMMIT) >/dev/null; \
	b=$$(sha256sum <$(IMAGE_ARCHIVE)); \
	if [ "$$a" = "$$b" ]; then echo "make image twice: the same archive, sha256 $${a%% *}"; \
	else echo "make image twice: the archives differ ($${a%% *}, $${b%% *})"; exit 1; fi
	@scripts/services.sh postgres nats podman
	cd tools/image && IMAGE_ARCHIVE=$(CURDIR)/$(IMAGE_ARCHIVE) $(GO) test -count=1 -v ./...

# Runs the relay against the local database with the environment's settings,
# migrating the table first. The relay has no default broker: this target
# asks for stdout:// (events printed as JSON lines) unless PUBLISHER_URL is
# set, e.g. `PUBLISHER_URL=nats://127.0.0.1:4222 make run`.
run: build
	@[ -n "$${PUBLISHER_URL:-}" ] || echo "make run: PUBLISHER_URL is not set, so stdout:// (events printed here)"
	PUBLISHER_URL=$${PUBLISHER_URL:-stdout://} STORAGE_AUTO_MIGRATE=$${STORAGE_AUTO_MIGRATE:-true} LOG_FORMAT=$${LOG_FORMAT:-text} ./bin/relay

# The demo drops its table and stream when it ends; KEEP=1 leaves them.
KEEP ?=
demo: build
	scripts/demo.sh $(if $(KEEP),-keep)

# Starts PostgreSQL, MariaDB, RabbitMQ and Redis when nothing answers on their
# ports (NATS and Kafka run inside the tests), installing what is missing from
# Debian packages (root or sudo) along with Chromium for the console's browser
# tests, checks docker-compose.yml, then runs every
# test with the race detector, the chaos suite included.
# The slowest packages come first on the command line, so that they start
# first: last, their minutes were the run's tail (8.5 instead of 9 minutes
# on 2 cores).
SLOW_TESTS = ./pkg/relay/ ./pkg/storage/postgres/ ./internal/chaos/ ./cmd/relay-cli/
test: services compose-check
	$(GO) test -race -count=1 $(SLOW_TESTS) ./...
	$(MAKE) --no-print-directory helm-test

# The Helm chart's test: it renders deploy/helm/outbox-relay with the Helm
# libraries (a module of its own, so the relay's stays free of them). It
# starts no goroutine of its own, so it runs without -race, which would
# cost a cold CI machine a minute more compiling Helm and Kubernetes.
helm-test:
	cd deploy/helm && $(GO) test -count=1 ./...

services:
	scripts/services.sh postgres mariadb rabbitmq redis chromium

# Compose v2 (`docker compose`) when it is installed, else the standalone
# docker-compose (v1, the Debian package scripts/services.sh installs when
# neither is there).
# Recursive, so that only the targets that use it run the check.
COMPOSE_BIN = $(shell docker compose version >/dev/null 2>&1 && echo 'docker compose' || echo docker-compose)

# docker-compose.yml must parse with every combination of profiles; no Docker
# engine is needed for that.
compose-check:
	@scripts/services.sh docker-compose
	@set -e; for k in '' '--profile kafka'; do for a in '' '--profile amqp'; do for r in '' '--profile redis'; do for m in '' '--profile mysql'; do for t in '' '--profile tools'; do \
		echo "$(COMPOSE_BIN) $$k $$a $$r $$m $$t config -q" | tr -s ' '; \
		$(COMPOSE_BIN) $$k $$a $$r $$m $$t config -q; \
	done; done; done; done; done

# The randomized interleaving tests of the claims alone (unordered, and
# ORDERING=partition), for longer than make test runs them: producers write
# for DURATION while relays claim; SEED repeats a run's choices (each test
# prints the seed it drew). STORAGE=postgres (the default): private
# PostgreSQL clusters, sweeps off (docs/architecture.md, "The claim
# frontier"). STORAGE=mysql: a database of its own on the local MariaDB,
# sweeps every second, the guard MySQL's cursor still needs (SWEEP=24h
# turns them off, and shows why: "Storage drivers"). CAPTURE=wal: the
# relays with CAPTURE=wal on a private cluster while an operator changes
# the publication under them (pkg/relay, "Capture from the WAL").
# STORAGE=mysql CAPTURE=binlog: the relays with CAPTURE=binlog on a private
# MariaDB with its binary log on, sweeps off, while an operator kills the
# reader's connections and rotates and purges the log (pkg/relay, "Capture
# from the binary log").
DURATION ?= 1m
SEED ?=
SWEEP ?=
CAPTURE ?= poll
FUZZ_PKG = $(if $(filter wal binlog,$(CAPTURE)),./pkg/relay/,./pkg/storage/$(STORAGE)/)
FUZZ_TEST = $(if $(filter wal,$(CAPTURE)),WAL,$(if $(filter binlog,$(CAPTURE)),Binlog,))ClaimsUnderRandomInterleavings$$
fuzz: services
	INTERLEAVE_DURATION=$(DURATION) INTERLEAVE_SEED=$(SEED) INTERLEAVE_SWEEP=$(SWEEP) $(GO) test -race -count=1 -timeout 0 -v \
		-run '$(FUZZ_TEST)' $(FUZZ_PKG)

# The fault-injection suite alone, verbose: kills, outages, restarts.
chaos: services
	$(GO) test -race -count=1 -v ./internal/chaos/

# The docker-compose stack (needs a Docker engine): postgres, nats, relay,
# prometheus, grafana; PROFILES="kafka amqp redis" adds the other brokers, and
# PROFILES=mysql MariaDB with a relay of its own. Host
# ports come from OUTBOX_*_PORT variables (see docker-compose.yml); their
# defaults keep clear of the local services `make test` starts.
PROFILES ?=
COMPOSE = $(COMPOSE_BIN) $(foreach p,$(PROFILES),--profile $(p))
up:
	$(COMPOSE) up -d --build
down:
	$(COMPOSE) --profile kafka --profile amqp --profile redis --profile tools --profile mysql down -v

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
# (nats, kafka, amqp, redis or webhook; in-process NATS and Kafka, the local
# RabbitMQ and Redis, an in-process HTTP endpoint answering in 5 ms) and into
# null:// (the storage side alone), printing events/s, and runs the bare
# claim → mark-delivered SQL loops the relay is measured against: leased
# (ClaimLoop) and held (HeldClaimLoop: lock 500 in write order, mark them
# DELIVERED by row address, commit; the ceiling of LEASE_MODE=lock).
# STORAGE=mysql drains a MariaDB/MySQL table instead of PostgreSQL's (every
# mode but memory).
# MODE=latency: one event per transaction at 100/s, created_at → ack p50/p95/p99
# and COMMIT → ack p50/p99
# (PostgreSQL: LISTEN/NOTIFY; MySQL: POLL_INTERVAL=100ms).
# MODE=prepared: the latency benchmark for a two-phase producer (outbox.notify
# off, PREPARE, PREPARED_GAP, COMMIT PREPARED) on a private cluster with
# max_prepared_transactions: COMMIT PREPARED → ack p50/p99/max.
# MODE=scheduled: events due 50 ms-1 s after their insert, 20/s, on
# PostgreSQL: available_at -> ack p50/p99, polling only against asking when
# the next row comes due; and the cost of that question on an idle table.
# MODE=ordering: a 100-key backlog with ORDERING=partition and with none.
# MODE=memory: the relay binary drains 1,000,000 events; peak and quarterly RSS.
# MODE=memory-large: the same with 150 events of 10 MB into null://, which
# MAX_BATCH_BYTES must keep under 300 MB.
# MODE=cpu: the relay binary's own CPU time per event over a 100,000-event
# drain into NATS and null://; BENCH_RELAY_BINS=a,b adds other builds and
# OPEN_OUTBOX_RELAY_BIN Open Outbox Relay's binary to the same run.
# MODE=delete: draining into null:// and NATS with DELIVERED_RETENTION=0
# (rows deleted at settle) beside the same drains marking rows DELIVERED,
# into null:// also with LEASE_MODE=status (claims leased, not held).
# MODE=terminate: EVENTS written by one bulk transaction drained into
# NATS with held claims, without and then with 10 pg_terminate_backend of
# the claiming connections during the drain: both times and their ratio.
# MODE=horizon: three rounds of EVENTS into null:// on one table, without
# and then with a transaction holding a snapshot (vacuum, purge) back for
# all three: rate, mean claim time and CPU per event of the database.
# MODE=horizon-app: the same with events whose producer set created_at a
# second before the insert (PostgreSQL: they go through the due index).
# MODE=horizon-ordered: the same with ORDERING=partition, the events
# spread over KEYS partition keys (0, the default: events without a key).
# MODE=stats: a burst of EVENTS drained on a table never analysed, one
# analysed while empty, and one analysed after the burst.
# MODE=wal: CAPTURE=poll against CAPTURE=wal on a private cluster with
# wal_level=logical (PostgreSQL's server binaries, no shared server): the
# database's and the relay's CPU per event for EVENTS marked and deleted,
# 8 producers for WAL_DURATION (produced/s, delivered/s, backlog), commit →
# publish latency at 1,000 events/s, and three rounds of EVENTS with and
# without a snapshot held; a table of it all at the end.
# MODE=binlog: CAPTURE=poll against CAPTURE=binlog on a private MariaDB with
# its binary log on: drain rate and the server's CPU per event (50,000
# events in transactions of 100, with a producer-only run to subtract),
# and commit → publish latency at 100 single-event transactions a second.
# MODE=upgrade: a table of ROWS events made by an earlier release's schema
# (PostgreSQL and MySQL), upgraded by migrate --cleanup while four
# producers insert one event per transaction: the longest insert and how
# long migrate took.
# Every drain reports the database server's CPU per event (all its
# processes, from /proc) beside the relay's.
BROKER ?= nats
MODE ?= throughput
STORAGE ?= postgres
WAL_DURATION ?= 60s
KEYS ?= 0
PREPARED_GAP ?= 10ms
BENCH_BROKER = $(if $(filter kafka,$(BROKER)),Kafka,$(if $(filter amqp,$(BROKER)),AMQP,$(if $(filter redis,$(BROKER)),Redis,$(if $(filter webhook,$(BROKER)),Webhook,NATS))))
bench: services
ifeq ($(MODE),binlog)
	$(GO) test -run '^$$' -bench 'Binlog$$' -benchtime 1x -timeout 60m ./pkg/relay
else ifeq ($(MODE),latency)
	$(GO) test -run '^$$' -bench 'LatencyNATS$$' -benchtime 1x ./pkg/relay -storage $(STORAGE)
else ifeq ($(MODE),prepared)
	$(GO) test -run '^$$' -bench 'LatencyPrepared$$' -benchtime 1x ./pkg/relay -prepared.gap $(PREPARED_GAP)
else ifeq ($(MODE),scheduled)
	$(GO) test -run '^$$' -bench 'ScheduledNATS$$' -benchtime 1x ./pkg/relay
	$(GO) test -run '^$$' -bench 'NextDueIdle$$' -benchtime 5000x ./pkg/storage/postgres
else ifeq ($(MODE),memory)
	$(GO) test -run '^$$' -bench 'DrainMemory$$' -benchtime 1x -timeout 60m ./cmd/relay
else ifeq ($(MODE),memory-large)
	$(GO) test -run '^$$' -bench 'DrainMemory$$' -benchtime 1x -timeout 60m ./cmd/relay \
		-memory.events 150 -memory.payload 10485760 -memory.publisher null
else ifeq ($(MODE),cpu)
	$(GO) test -run '^$$' -bench 'DrainCPU$$' -benchtime 1x -timeout 60m ./cmd/relay
else ifeq ($(MODE),ordering)
	$(GO) test -run '^$$' -bench 'DrainNATS(Partition|Keyed)$$' -benchtime $(BENCHTIME) ./pkg/relay -events $(EVENTS) -storage $(STORAGE) $(if $(filter-out 0,$(KEYS)),-ordering.keys $(KEYS))
else ifeq ($(MODE),horizon)
	$(GO) test -run '^$$' -bench 'Horizon$$' -benchtime 1x -timeout 60m ./pkg/relay -events $(EVENTS) -storage $(STORAGE)
else ifeq ($(MODE),horizon-app)
	$(GO) test -run '^$$' -bench 'Horizon$$' -benchtime 1x -timeout 60m ./pkg/relay -events $(EVENTS) -horizon.app-created
else ifeq ($(MODE),horizon-ordered)
	$(GO) test -run '^$$' -bench 'HorizonOrdered$$' -benchtime 1x -timeout 60m ./pkg/relay -events $(EVENTS) -storage $(STORAGE) -horizon.keys $(KEYS)
else ifeq ($(MODE),stats)
	$(GO) test -run '^$$' -bench 'StaleStats$$' -benchtime 1x -timeout 60m ./pkg/relay -events $(EVENTS) -storage $(STORAGE)
else ifeq ($(MODE),wal)
	$(GO) test -run '^$$' -bench 'WAL$$' -benchtime 1x -timeout 120m ./pkg/relay -events $(EVENTS) -wal.duration $(WAL_DURATION)
else ifeq ($(MODE),upgrade)
	$(GO) test -run '^$$' -bench 'Upgrade$$' -benchtime 1x -timeout 60m -v ./pkg/storage/postgres -upgrade.rows $(ROWS)
	$(GO) test -run '^$$' -bench 'Upgrade$$' -benchtime 1x -timeout 60m -v ./pkg/storage/mysql -upgrade.rows $(ROWS)
else ifeq ($(MODE),terminate)
	$(GO) test -run '^$$' -bench 'DrainTerminate$$' -benchtime 1x -timeout 60m ./pkg/relay -events $(EVENTS) -storage $(STORAGE)
else ifeq ($(MODE),delete)
	$(GO) test -run '^$$' -bench 'Drain(Null(Status)?|NATS)(Delete)?$$' -benchtime $(BENCHTIME) -timeout 60m ./pkg/relay -events $(EVENTS) -storage $(STORAGE)
else
	$(GO) test -run '^$$' -bench 'Drain($(BENCH_BROKER)|Null|NullStatus)$$|ClaimLoop$$|HeldClaimLoop$$' -benchtime $(BENCHTIME) -timeout 60m ./pkg/relay -events $(EVENTS) -storage $(STORAGE)
endif

clean:
	rm -rf bin dist relay-demo.log
