#!/usr/bin/env bash
# Makes sure the services that `make test` and `make demo` talk to answer on
# 127.0.0.1, installing them from Debian packages and starting them when they
# do not, and that the tools they use are installed.
# Usage: scripts/services.sh postgres [mariadb] [nats] [rabbitmq] [redis] [docker-compose] [chromium] [podman]
#
# The services are for `go test -race`, which needs cgo and so a C compiler:
# asking for any of them also installs gcc when it is missing.
#
# A service that already answers is left alone. For each service this script
# starts, it prints "started <name> <pid-or-how-to-stop>" so callers can stop
# what they started; for nats, the line ends with its JetStream directory,
# which the caller removes after stopping it.
set -euo pipefail

answers() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

as_root() {
	if [ "$(id -u)" = 0 ]; then
		"$@"
	elif command -v sudo >/dev/null; then
		sudo "$@"
	else
		echo "services.sh: need root to run: $*" >&2
		exit 1
	fi
}

apt_updated=
apt_install() {
	if [ -z "$apt_updated" ]; then
		as_root apt-get update -qq
		apt_updated=1
	fi
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# apt_install, with the packages' maintainer scripts kept from starting or
# stopping services (a policy-rc.d that answers 101, unless there is one
# already, as in Docker images): for server binaries wanted next to a
# server that already answers, which the package's own would fight over
# the port with, or stop (Debian's mariadb init script ends with killall
# when its shutdown fails).
apt_install_no_services() {
	local policy=/usr/sbin/policy-rc.d
	if [ -e "$policy" ]; then
		apt_install "$@"
		return
	fi
	printf '#!/bin/sh\n# scripts/services.sh: no service starts or stops while it installs.\nexit 101\n' |
		as_root tee "$policy" >/dev/null
	as_root chmod 755 "$policy"
	local rc=0
	apt_install "$@" || rc=$?
	as_root rm -f "$policy"
	return "$rc"
}

# Whether the MariaDB server binaries that internal/mycluster runs are
# installed.
have_mariadbd() {
	[ -x /usr/sbin/mariadbd ] && [ -x /usr/bin/mariadb-install-db ]
}

wait_for() {
	local port=$1 name=$2
	for _ in $(seq 1 120); do
		answers "$port" && return 0
		sleep 0.5
	done
	echo "services.sh: $name did not start on 127.0.0.1:$port" >&2
	exit 1
}

# Whether the PostgreSQL server binaries are installed where
# internal/pgcluster looks for them.
have_initdb() {
	local bindir
	if bindir=$(pg_config --bindir 2>/dev/null) && [ -x "$bindir/initdb" ]; then
		return 0
	fi
	compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null && return 0
	command -v initdb >/dev/null
}

postgres() {
	if answers 5432; then
		# Tests that need a server of their own (internal/pgcluster:
		# logical replication, restarts) run initdb and pg_ctl, which a
		# server answering here (a container's, say) does not bring.
		# Installing them leaves that server alone.
		if ! have_initdb; then
			echo "services.sh: installing the PostgreSQL server binaries (initdb, pg_ctl) for internal/pgcluster" >&2
			apt_install postgresql
		fi
		return 0
	fi
	if ! command -v pg_ctlcluster >/dev/null || ! have_initdb; then
		echo "services.sh: installing PostgreSQL from Debian packages" >&2
		apt_install postgresql
	fi
	local ver hba
	ver=$(ls /etc/postgresql | sort -V | tail -1)
	hba=/etc/postgresql/$ver/main/pg_hba.conf
	# The tests connect as postgres without a password over TCP.
	local trusted=
	if ! as_root grep -q '^host all all 127.0.0.1/32 trust' "$hba"; then
		echo "services.sh: trusting 127.0.0.1 connections in $hba (test server)" >&2
		as_root sed -i '1i host all all 127.0.0.1/32 trust' "$hba"
		trusted=1
	fi
	# Installing the package starts the cluster on systemd hosts, and
	# pg_ctlcluster then exits 2 ("already running"): whether the server
	# answers below is what counts.
	as_root pg_ctlcluster --skip-systemctl-redirect "$ver" main start || true
	wait_for 5432 PostgreSQL
	if [ -n "$trusted" ]; then
		# A server that was already running has not read the new line yet.
		as_root pg_ctlcluster --skip-systemctl-redirect "$ver" main reload
	fi
	echo "started postgres pg_ctlcluster $ver main"
}

# MariaDB for the inbox's MySQL dialect: the tests connect as root over TCP
# on 127.0.0.1 without a password, and create a database each.
mariadb() {
	if answers 3306; then
		# Tests that need a server of their own (internal/mycluster: the
		# binary log, restarts, kills) run mariadb-install-db and
		# mariadbd, which a server answering here (a container's, say)
		# does not bring. Installing them leaves that server alone.
		if ! have_mariadbd; then
			echo "services.sh: installing the MariaDB server binaries (mariadbd, mariadb-install-db) for internal/mycluster" >&2
			apt_install_no_services mariadb-server
		fi
		return 0
	fi
	if ! have_mariadbd; then
		echo "services.sh: installing MariaDB from Debian packages" >&2
		apt_install mariadb-server
	fi
	# Installing the package may have started the server (systemd hosts).
	if ! answers 3306; then
		# Names are not resolved, so 127.0.0.1 is the account's host
		# below, never "localhost" (root's socket-only account).
		local conf=/etc/mysql/mariadb.conf.d/99-outbox-relay-tests.cnf
		if [ -d /etc/mysql/mariadb.conf.d ] && [ ! -f "$conf" ]; then
			printf '[mysqld]\nbind-address = 127.0.0.1\nport = 3306\nskip-name-resolve\n' | as_root tee "$conf" >/dev/null
		fi
		as_root install -d -o mysql -g mysql /run/mysqld
		if [ ! -d /var/lib/mysql/mysql ]; then
			as_root mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/dev/null
		fi
		as_root start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd -- --user=mysql
		wait_for 3306 MariaDB
		echo "started mariadb mariadb-admin-shutdown"
	fi
	# Debian's root logs in through the Unix socket only; the tests need
	# it over TCP without a password (a test server, like PostgreSQL's
	# trust line above).
	if ! mariadb -h 127.0.0.1 -u root -e 'SELECT 1' >/dev/null 2>&1; then
		echo "services.sh: letting root connect from 127.0.0.1 without a password (test server)" >&2
		# A server that resolves names maps 127.0.0.1 to root@localhost,
		# one that does not to root@127.0.0.1: both take the empty
		# password (root@localhost still logs in through the socket too).
		as_root mariadb -u root -e "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
			GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
			ALTER USER 'root'@'localhost' IDENTIFIED VIA unix_socket OR mysql_native_password USING PASSWORD('');"
	fi
}

nats() {
	answers 4222 && return 0
	if ! command -v nats-server >/dev/null && [ ! -x /usr/sbin/nats-server ]; then
		echo "services.sh: installing nats-server from Debian packages" >&2
		apt_install nats-server
	fi
	local bin dir
	bin=$(command -v nats-server || echo /usr/sbin/nats-server)
	dir=$(mktemp -d)
	"$bin" -a 127.0.0.1 -p 4222 -js -sd "$dir" >"$dir/nats.log" 2>&1 &
	local pid=$!
	wait_for 4222 "NATS"
	echo "started nats $pid $dir"
}

rabbitmq() {
	answers 5672 && return 0
	if ! command -v rabbitmq-server >/dev/null && [ ! -x /usr/sbin/rabbitmq-server ]; then
		echo "services.sh: installing rabbitmq-server from Debian packages" >&2
		apt_install rabbitmq-server
	fi
	as_root env PATH="$PATH:/usr/sbin" rabbitmq-server -detached
	wait_for 5672 RabbitMQ
	echo "started rabbitmq rabbitmqctl-stop"
}

# Redis for the tests: no snapshots, no append-only file. Tests that stop
# a server run redis-server processes of their own, from the same package.
redis() {
	answers 6379 && return 0
	if ! command -v redis-server >/dev/null && [ ! -x /usr/bin/redis-server ]; then
		echo "services.sh: installing redis-server from Debian packages" >&2
		apt_install redis-server
	fi
	local bin dir
	bin=$(command -v redis-server || echo /usr/bin/redis-server)
	dir=$(mktemp -d)
	"$bin" --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
		--dir "$dir" --logfile "$dir/redis.log" --pidfile "$dir/redis.pid"
	wait_for 6379 Redis
	echo "started redis $(cat "$dir/redis.pid")"
}

# docker-compose (the Debian package) checks docker-compose.yml's syntax; no
# Docker engine is needed for that. Compose v2 (`docker compose`) does too.
docker_compose() {
	command -v docker-compose >/dev/null && return 0
	docker compose version >/dev/null 2>&1 && return 0
	echo "services.sh: installing docker-compose from Debian packages" >&2
	apt_install docker-compose
}

# Chromium (headless) for the console's browser tests, which drive it with
# chromedp; they look for it on PATH.
chromium_browser() {
	command -v chromium >/dev/null && return 0
	command -v chromium-browser >/dev/null && return 0
	echo "services.sh: installing chromium for the console's browser tests" >&2
	apt_install chromium
}

# podman and runc run the image in `make test-image` (tools/image/run_test.go
# passes --runtime runc: crun refuses this machine's hybrid cgroups). A
# machine where they cannot be installed (no root, no package) is told so
# and goes on: the run test then skips, naming what is missing.
podman_runtime() {
	command -v podman >/dev/null && command -v runc >/dev/null && return 0
	echo "services.sh: installing podman and runc from Debian packages for make test-image" >&2
	apt_install podman runc
}

# go test -race needs cgo, and cgo a C compiler and the C library headers.
c_compiler() {
	command -v gcc >/dev/null && return 0
	echo "services.sh: installing gcc for go test -race (cgo)" >&2
	apt_install gcc libc6-dev
}

for svc in "$@"; do
	case "$svc" in
	postgres | mariadb | nats | rabbitmq | redis)
		c_compiler
		"$svc"
		;;
	docker-compose) docker_compose ;;
	chromium) chromium_browser ;;
	podman) (podman_runtime) || echo "services.sh: podman did not install; the image's run test will skip" >&2 ;;
	*)
		echo "services.sh: unknown service $svc (postgres, mariadb, nats, rabbitmq, redis, docker-compose, chromium, podman)" >&2
		exit 2
		;;
	esac
done
