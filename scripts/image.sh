#!/usr/bin/env bash
# `make image`: builds the OCI image of relay and relay-cli offline, without
# a Docker engine or a base image, and writes it as an OCI archive that
# `podman load -i` and `skopeo copy oci-archive:...` read:
#   dist/outbox-relay_<version>_linux_<arch>.oci.tar
# with a CycloneDX SBOM of each binary beside it (scripts/sbom.sh):
#   dist/outbox-relay_<version>_linux_<arch>_relay.cdx.json, ..._relay-cli.cdx.json
# The binaries are the release's (scripts/build-static.sh); tools/image
# assembles the image (the Dockerfile's layout, user 65532, OCI labels, CA
# certificates, no shell), every file's mtime and the image's creation time
# being the commit's time, so that the same commit gives the same digest.
# IMAGE_ARCH picks the architecture (default: this machine's GOARCH). It
# leaves the rest of dist/ alone.
set -euo pipefail
cd "$(dirname "$0")/.."

version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
commit=${COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || true)}
go=${GO:-go}
arch=${IMAGE_ARCH:-$("$go" env GOARCH)}
created=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}

name="outbox-relay_${version#v}_linux_${arch}"
bins="dist/image_linux_${arch}"
rm -rf "$bins"
echo "==> $name: binaries" >&2
VERSION=$version COMMIT=$commit GO=$go scripts/build-static.sh linux "$arch" "$bins"
echo "==> $name: SBOM" >&2
GO=$go scripts/sbom.sh "$version" "dist/${name}_" "$bins/relay" "$bins/relay-cli"
echo "==> $name: image" >&2
root=$(pwd)
(cd tools/image && "$go" run . -arch "$arch" -version "$version" -revision "$commit" \
	-created "$created" -relay "$root/$bins/relay" -cli "$root/$bins/relay-cli" \
	-out "$root/dist/$name.oci.tar")
rm -rf "$bins"
