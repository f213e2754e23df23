#!/usr/bin/env bash
# `make demo`: starts PostgreSQL and NATS with JetStream when they are not
# running (unless STORAGE_URL or PUBLISHER_URL name others), runs
# tools/demo against bin/relay, and stops what it started.
# tools/demo drops its table and stream on the way out (success, failure,
# Ctrl-C) unless given -keep (`make demo KEEP=1`). Arguments go to tools/demo.
set -euo pipefail
cd "$(dirname "$0")/.."

# The demo connects where STORAGE_URL and PUBLISHER_URL point when they are
# set (as the relay would); only the local defaults are started here.
want=()
[ -n "${STORAGE_URL:-}" ] || want+=(postgres)
[ -n "${PUBLISHER_URL:-}" ] || want+=(nats)
started=""
if [ ${#want[@]} -gt 0 ]; then started=$(scripts/services.sh "${want[@]}"); fi
cleanup() {
	while read -r word name how rest; do
		[ "$word" = started ] || continue
		case "$name" in
		nats)
			kill "$how" 2>/dev/null || true
			# Its JetStream directory, once it has let go of it.
			for _ in $(seq 1 50); do kill -0 "$how" 2>/dev/null || break; sleep 0.1; done
			rm -rf "$rest"
			;;
		postgres)
			if [ "$(id -u)" = 0 ]; then pg_ctlcluster --skip-systemctl-redirect $rest stop; else sudo pg_ctlcluster --skip-systemctl-redirect $rest stop; fi
			;;
		esac
		echo "==> stopped $name"
	done <<<"$started"
}
trap cleanup EXIT
go run ./tools/demo "$@"
