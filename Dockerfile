# syntax=docker/dockerfile:1
# Outbox Relay image: static binaries on distroless, running as non-root.
#   docker build --build-arg VERSION=$(git describe --tags --always) \
#     --build-arg COMMIT=$(git rev-parse --short=12 HEAD) -t outbox-relay .
#   docker run --rm outbox-relay --version
#   docker run --rm --entrypoint relay-cli outbox-relay migrate --print
# Open Outbox's image paths work too: /app/relay and /app/cli (its CronJobs
# run /app/cli prune --delivered-age 7d --dead-age 30d).

ARG GO_VERSION=1.26

FROM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# Dependencies first, so code changes reuse the module cache layer.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=
ENV CGO_ENABLED=0
RUN go build -trimpath -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" -o /out/relay ./cmd/relay \
 && go build -trimpath -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" -o /out/relay-cli ./cmd/relay-cli \
 && mkdir -p /out/app \
 && ln -s /usr/local/bin/relay /out/app/relay \
 && ln -s /usr/local/bin/relay-cli /out/app/cli

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
ARG COMMIT=
LABEL org.opencontainers.image.title="outbox-relay" \
      org.opencontainers.image.description="Transactional outbox relay: PostgreSQL or MySQL to NATS JetStream, Kafka or RabbitMQ" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}" \
      org.opencontainers.image.source="https://github.com/outbox-relay/relay"
COPY --from=build /out/relay /out/relay-cli /usr/local/bin/
# A directory, so its symbolic links arrive as links (no second copy of
# the binaries): Open Outbox's /app/relay and /app/cli.
COPY --from=build /out/app /app
# Numeric, the distroless nonroot user: Kubernetes can check runAsNonRoot
# only against a numeric USER (a name fails "image has non-numeric user").
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/relay"]
