#!/usr/bin/env bash
# Run a command with a throwaway Kafka cluster (franz-go's kfake, built from
# emulator/kafka and run as its own process on free 127.0.0.1 ports) and
# KAFKA_BROKERS exported, then stop it by PID. KAFKA_CONTROL is exported too:
# the loopback address where tests inject kfake's faults (emulator/kafka/main.go
# documents it).
#
#   emulator/with-kafka.sh go test ./worker/kafkaworker/
#
# A KAFKA_BROKERS already set is the user's own cluster: the command runs
# against it and nothing is started (tests that inject faults skip: there
# is no KAFKA_CONTROL). Without a command the cluster runs until Ctrl-C
# (or kill -TERM of the PID it prints, when backgrounded).
# emulator/kafka/main.go says what kfake does not model.
set -euo pipefail

if [ -n "${KAFKA_BROKERS:-}" ]; then
	exec "$@"
fi

root=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d)
pid=""
cleanup() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 1 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

(cd "$root" && ${GO:-go} build -o "$dir/kafka" ./emulator/kafka)
"$dir/kafka" -control 127.0.0.1:0 ${KAFKA_EMULATOR_FLAGS:-} >"$dir/out" 2>"$dir/err" &
pid=$!
brokers=""
for _ in $(seq 1 300); do
	brokers=$(sed -n 's/^KAFKA_BROKERS=//p' "$dir/out")
	[ -n "$brokers" ] && break
	if ! kill -0 "$pid" 2>/dev/null; then
		cat "$dir/err" >&2
		echo "kafka: cluster failed to start" >&2
		exit 3
	fi
	sleep 0.1
done
if [ -z "$brokers" ]; then
	cat "$dir/err" >&2
	echo "kafka: cluster not serving within 30s" >&2
	exit 3
fi

export KAFKA_BROKERS=$brokers
KAFKA_CONTROL=$(sed -n 's/^KAFKA_CONTROL=//p' "$dir/out")
export KAFKA_CONTROL
export CLAIMFIRST_KAFKA=1
export CLAIMFIRST_KAFKA_PID=$pid

if [ "$#" -eq 0 ]; then
	echo "kafka: KAFKA_BROKERS=$KAFKA_BROKERS KAFKA_CONTROL=$KAFKA_CONTROL (pid $$); Ctrl-C or kill -TERM $$ stops it."
	wait "$pid"
	exit $?
fi

set +e
"$@"
status=$?
set -e
exit $status
