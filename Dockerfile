# syntax=docker/dockerfile:1
# Outbox Relay image for Docker users: static binaries on an empty base,
# running as non-root. It describes the image `make image` builds without
# Docker (tools/image, which tools/image/dockerfile_test.go holds this file
# to): the same paths, user, entrypoint, environment and labels.
#   docker build --build-arg VERSION=$(git describe --tags --always) \
#     --build-arg COMMIT=$(git rev-parse --short=12 HEAD) -t outbox-relay .
#   docker run --rm outbox-relay --version
#   docker run --rm --entrypoint relay-cli outbox-relay migrate --print
# Open Outbox's image paths work too: /app/relay and /app/cli (its CronJobs
# run /app/cli prune --delivered-age 7d --dead-age 30d).
#
# What differs from `make image`'s: the CA certificates are Debian's
# ca-certificates bundle of the build stage, where make image ships the NSS
# roots of golang.org/x/crypto/x509roots/fallback (those without a
# distrust-after date) at tools/image/go.mod's version; and the files'
# times are the build's, so the digest is not reproducible.

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
# The flags of scripts/build-static.sh, which make release and make image use.
RUN go build -trimpath -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" -o /out/relay ./cmd/relay \
 && go build -trimpath -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" -o /out/relay-cli ./cmd/relay-cli \
 && mkdir -p /out/app \
 && ln -s /usr/local/bin/relay /out/app/relay \
 && ln -s /usr/local/bin/relay-cli /out/app/cli \
 && mkdir -p /out/root/etc/ssl/certs /out/root/tmp /out/root/home /out/home/nonroot \
 && cp /etc/ssl/certs/ca-certificates.crt /out/root/etc/ssl/certs/ \
 && printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >/out/root/etc/passwd \
 && printf 'root:x:0:\nnonroot:x:65532:\n' >/out/root/etc/group \
 && chmod 1777 /out/root/tmp && chmod 700 /out/home/nonroot

FROM scratch
ARG VERSION=dev
ARG COMMIT=
LABEL org.opencontainers.image.title="outbox-relay" \
      org.opencontainers.image.description="Transactional outbox relay: PostgreSQL or MySQL to NATS JetStream, Kafka or RabbitMQ" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}" \
      org.opencontainers.image.source="https://github.com/outbox-relay/relay"
# /etc/passwd and /etc/group naming 65532 nonroot, the CA certificates, /tmp,
# and the home directory, owned by 65532 as in make image's.
COPY --from=build /out/root/ /
# The contents of /out/home, so that /home/nonroot keeps its mode (0700);
# /home itself, from /out/root, stays root's.
COPY --from=build --chown=65532:65532 /out/home/ /home/
COPY --from=build /out/relay /out/relay-cli /usr/local/bin/
# A directory, so its symbolic links arrive as links (no second copy of
# the binaries): Open Outbox's /app/relay and /app/cli.
COPY --from=build /out/app /app
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
WORKDIR /home/nonroot
# Numeric, distroless's nonroot user: Kubernetes can check runAsNonRoot
# only against a numeric USER (a name fails "image has non-numeric user").
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/relay"]
