#!/usr/bin/env bash
# Writes a CycloneDX SBOM (JSON) of each Go binary given, from the module
# list Go embeds in it (`go version -m`): every module linked in, with its
# version and go.sum hash, and the Go standard library's version. The
# generator is CycloneDX's cyclonedx-gomod, run at a fixed version through
# the Go module proxy (cached after the first run). The SBOM has no
# timestamp or serial number, so that it is the same for the same binary.
# Usage: scripts/sbom.sh VERSION OUT_PREFIX BINARY...
#   writes OUT_PREFIX<binary name>.cdx.json for each BINARY
set -euo pipefail
cd "$(dirname "$0")/.."
go=${GO:-go}
gomod=github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@v1.10.0
version=$1 prefix=$2
shift 2
for bin in "$@"; do
	"$go" run "$gomod" bin -json -std -noserial -notimestamp \
		-version "$version" -output "$prefix$(basename "$bin").cdx.json" "$bin"
done
