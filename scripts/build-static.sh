#!/usr/bin/env bash
# Builds relay and relay-cli as `make release` ships them: static
# (CGO_ENABLED=0), -trimpath, stripped, stamped with VERSION and COMMIT.
# Usage: scripts/build-static.sh OS ARCH DIR   (writes DIR/relay, DIR/relay-cli)
# scripts/release.sh and scripts/image.sh both build through it, so the
# image holds the release's binaries.
set -euo pipefail
cd "$(dirname "$0")/.."
os=$1 arch=$2 dir=$3
version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
commit=${COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || true)}
go=${GO:-go}
mkdir -p "$dir"
for cmd in relay relay-cli; do
	CGO_ENABLED=0 GOOS=$os GOARCH=$arch "$go" build -trimpath \
		-ldflags "-s -w -X main.version=$version -X main.commit=$commit" \
		-o "$dir/$cmd" "./cmd/$cmd"
done
