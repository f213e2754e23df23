#!/usr/bin/env bash
# `make demo`: starts PostgreSQL and NATS with JetStream when they are not
# running, runs tools/demo against bin/relay, and stops what it started.
set -euo pipefail
cd "$(dirname "$0")/.."

started=$(scripts/services.sh postgres nats)
cleanup() {
	while read -r word name how rest; do
		[ "$word" = started ] || continue
		case "$name" in
		nats) kill "$how" 2>/dev/null || true ;;
		postgres)
			if [ "$(id -u)" = 0 ]; then pg_ctlcluster --skip-systemctl-redirect $rest stop; else sudo pg_ctlcluster --skip-systemctl-redirect $rest stop; fi
			;;
		esac
		echo "==> stopped $name"
	done <<<"$started"
}
trap cleanup EXIT
go run ./tools/demo "$@"
