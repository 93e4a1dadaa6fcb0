#!/usr/bin/env bash
# Run a command with a throwaway PostgreSQL cluster (initdb into a temporary
# directory, a free 127.0.0.1 port) and DATABASE_URL exported, then stop the
# server by PID and remove the directory.
#
#   emulator/with-postgres.sh go test ./claimstore/postgres/
#
# A DATABASE_URL already set is the user's own server: the command runs
# against it and nothing is started. The server never runs as root (initdb
# refuses to): run as root, the cluster belongs to the unprivileged user
# PG_USER (default: postgres if it exists, else nobody).
#
# Without a command it serves in the foreground until Ctrl-C (make postgres),
# or until kill -TERM of the PID it prints when it runs in the background
# (Ctrl-C does not reach a background job); either way it stops the server
# and removes the cluster.
set -euo pipefail

if [ -n "${DATABASE_URL:-}" ]; then
	exec "$@"
fi

bindir=${PG_BINDIR:-}
if [ -z "$bindir" ]; then
	if command -v initdb >/dev/null && command -v pg_ctl >/dev/null; then
		bindir=$(dirname "$(readlink -f "$(command -v initdb)")")
	else
		for d in /usr/lib/postgresql/*/bin; do
			[ -x "$d/initdb" ] && bindir=$d
		done
	fi
fi
if [ -z "$bindir" ] || [ ! -x "$bindir/initdb" ] || [ ! -x "$bindir/postgres" ] || [ ! -x "$bindir/pg_isready" ]; then
	echo "postgres: initdb, postgres and pg_isready not found; run: make tools (Debian: apt-get install postgresql), or set DATABASE_URL to a server of your own" >&2
	exit 3
fi

dir=$(mktemp -d)
chmod 755 "$dir"
run=()
if [ "$(id -u)" -eq 0 ]; then
	user=${PG_USER:-}
	if [ -z "$user" ]; then
		if id postgres >/dev/null 2>&1; then user=postgres; else user=nobody; fi
	fi
	run=(setpriv --reuid="$(id -u "$user")" --regid="$(id -g "$user")" --clear-groups --)
	chown "$user" "$dir"
fi

pid=""
cleanup() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -INT "$pid" 2>/dev/null || true # fast shutdown
		for _ in $(seq 1 100); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if ! "${run[@]}" "$bindir/initdb" -D "$dir/data" -U claimfirst --auth=trust --no-sync -E UTF8 >"$dir/initdb.log" 2>&1; then
	cat "$dir/initdb.log" >&2
	echo "postgres: initdb failed" >&2
	exit 3
fi

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# fsync off: the cluster is thrown away; crash tests kill workers, not the server.
"${run[@]}" "$bindir/postgres" -D "$dir/data" -h 127.0.0.1 -p "$port" -k "$dir" \
	-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300 \
	>"$dir/server.log" 2>&1 &
pid=$!
for _ in $(seq 1 150); do
	if "$bindir/pg_isready" -q -h 127.0.0.1 -p "$port" 2>/dev/null; then break; fi
	if ! kill -0 "$pid" 2>/dev/null; then
		cat "$dir/server.log" >&2
		echo "postgres: server failed to start" >&2
		exit 3
	fi
	sleep 0.1
done
if ! "$bindir/pg_isready" -q -h 127.0.0.1 -p "$port"; then
	cat "$dir/server.log" >&2
	echo "postgres: server not ready within 15s" >&2
	exit 3
fi

export DATABASE_URL="postgres://claimfirst@127.0.0.1:$port/postgres?sslmode=disable"
export CLAIMFIRST_POSTGRES=1
export CLAIMFIRST_POSTGRES_PID=$pid

if [ "$#" -eq 0 ]; then
	echo "postgres: $DATABASE_URL (pid $$, server pid $pid); Ctrl-C or kill -TERM $$ stops it."
	echo "In another shell: export DATABASE_URL='$DATABASE_URL'"
	wait "$pid"
	exit $?
fi

set +e
"$@"
status=$?
set -e
exit $status
