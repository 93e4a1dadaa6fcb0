#!/usr/bin/env bash
# Run a command with a throwaway RabbitMQ broker (a temporary data directory,
# free 127.0.0.1 ports for AMQP and Erlang distribution, its own epmd on a
# private port, a unique node name) and AMQP_URL exported, then stop the
# broker and its epmd by PID and remove the directory.
#
#   emulator/with-rabbitmq.sh go test ./rabbit/...
#
# An AMQP_URL already set is the user's own broker: the command runs against
# it and nothing is started. Without a command the broker runs until
# Ctrl-C (or kill -TERM of the PID it prints, when backgrounded).
set -euo pipefail

if [ -n "${AMQP_URL:-}" ]; then
	exec "$@"
fi

server=""
for s in ${RABBITMQ_SBIN:-/usr/lib/rabbitmq/lib/rabbitmq_server-*/sbin}/rabbitmq-server; do
	[ -x "$s" ] && server=$s
done
if [ -z "$server" ] || ! command -v epmd >/dev/null; then
	echo "rabbitmq: rabbitmq-server and epmd not found; run: make tools (Debian: apt-get install rabbitmq-server), or set AMQP_URL to a broker of your own" >&2
	exit 3
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
amqp_port=$(free_port)
dist_port=$(free_port)
epmd_port=$(free_port)

dir=$(mktemp -d)
pid=""
epmd_pid=""
cleanup() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 1 150); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
	fi
	# The broker's own process (beam), should the script have gone first.
	if [ -s "$dir/broker.pid" ]; then
		beam=$(cat "$dir/broker.pid")
		if kill -0 "$beam" 2>/dev/null; then
			kill -TERM "$beam" 2>/dev/null || true
			for _ in $(seq 1 100); do
				kill -0 "$beam" 2>/dev/null || break
				sleep 0.1
			done
			kill -KILL "$beam" 2>/dev/null || true
		fi
	fi
	[ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null || true
	if [ -n "$epmd_pid" ]; then
		kill -TERM "$epmd_pid" 2>/dev/null || true
	fi
	rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cat >"$dir/rabbitmq.conf" <<EOF
listeners.tcp.default = 127.0.0.1:$amqp_port
loopback_users = none
log.console = true
log.console.level = warning
log.file = false
EOF
echo '[].' >"$dir/enabled_plugins"

# Its own epmd, in the foreground of a background job so its PID is ours to
# stop (one that erl starts for itself outlives the node).
epmd -address 127.0.0.1 -port "$epmd_port" >"$dir/epmd.log" 2>&1 &
epmd_pid=$!

node="claimfirst-$$-$RANDOM@localhost"
HOME=$dir \
	RABBITMQ_NODENAME=$node \
	RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
	RABBITMQ_NODE_PORT=$amqp_port \
	RABBITMQ_DIST_PORT=$dist_port \
	ERL_EPMD_PORT=$epmd_port \
	ERL_EPMD_ADDRESS=127.0.0.1 \
	RABBITMQ_CONFIG_FILE=$dir/rabbitmq \
	RABBITMQ_ENABLED_PLUGINS_FILE=$dir/enabled_plugins \
	RABBITMQ_MNESIA_BASE=$dir/mnesia \
	RABBITMQ_LOG_BASE=$dir/log \
	RABBITMQ_PID_FILE=$dir/broker.pid \
	"$server" >"$dir/server.log" 2>&1 &
pid=$!

ready=""
for _ in $(seq 1 1200); do
	if (exec 3<>"/dev/tcp/127.0.0.1/$amqp_port") 2>/dev/null; then
		ready=1
		break
	fi
	if ! kill -0 "$pid" 2>/dev/null; then
		cat "$dir/server.log" >&2
		echo "rabbitmq: broker failed to start" >&2
		exit 3
	fi
	sleep 0.1
done
if [ -z "$ready" ]; then
	cat "$dir/server.log" >&2
	echo "rabbitmq: broker not ready within 120s" >&2
	exit 3
fi

export AMQP_URL="amqp://guest:guest@127.0.0.1:$amqp_port/"
export CLAIMFIRST_RABBITMQ=1
export CLAIMFIRST_RABBITMQ_PID=$pid

if [ "$#" -eq 0 ]; then
	echo "rabbitmq: $AMQP_URL (pid $$); Ctrl-C or kill -TERM $$ stops it."
	echo "In another shell: export AMQP_URL='$AMQP_URL'"
	wait "$pid"
	exit $?
fi

set +e
"$@"
status=$?
set -e
exit $status
