#!/usr/bin/env bash
# `make release`: builds relay and relay-cli for linux and darwin on amd64
# and arm64, stamped with VERSION and COMMIT, packs each pair with LICENSE,
# README.md and CHANGELOG.md into dist/outbox-relay_<version>_<os>_<arch>.tar.gz,
# writes a CycloneDX SBOM of each binary beside its archive
# (dist/outbox-relay_<version>_<os>_<arch>_relay.cdx.json, ..._relay-cli.cdx.json,
# scripts/sbom.sh), and dist/checksums.txt (SHA-256) of them all. It
# publishes nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
commit=${COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || true)}
go=${GO:-go}
targets=${TARGETS:-"linux/amd64 linux/arm64 darwin/amd64 darwin/arm64"}

rm -rf dist
mkdir -p dist
for target in $targets; do
	os=${target%/*} arch=${target#*/}
	name="outbox-relay_${version#v}_${os}_${arch}"
	dir="dist/$name"
	mkdir -p "$dir"
	echo "==> $name" >&2
	VERSION=$version COMMIT=$commit GO=$go scripts/build-static.sh "$os" "$arch" "$dir"
	GO=$go scripts/sbom.sh "$version" "dist/${name}_" "$dir/relay" "$dir/relay-cli"
	cp LICENSE README.md CHANGELOG.md "$dir/"
	tar -C dist -czf "dist/$name.tar.gz" "$name"
	rm -rf "$dir"
done
(cd dist && sha256sum -- *.tar.gz *.cdx.json >checksums.txt)
echo "==> dist/: $(cd dist && ls | tr '\n' ' ')" >&2
