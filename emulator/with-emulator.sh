#!/usr/bin/env bash
# Run a command with the emulator (moto: SQS + DynamoDB) on a free 127.0.0.1
# port, AWS_ENDPOINT_URL and dummy credentials exported, then stop it by PID.
#
#   emulator/with-emulator.sh go test ./...
#
# Without a command it serves in the foreground until Ctrl-C (make emulator),
# or until kill -TERM of the PID it prints when it runs in the background
# (Ctrl-C does not reach a background job).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-python3}
# Without moto for python3, use the one `make tools` installs into .venv.
if [ -z "${PYTHON:-}" ] && ! "$python" -c 'import moto, werkzeug' 2>/dev/null && [ -x "$here/../.venv/bin/python" ]; then
	python="$here/../.venv/bin/python"
fi

if ! "$python" -c 'import moto, werkzeug' 2>/dev/null; then
	echo "emulator: moto is not installed for $python; run: make tools (or pip install -r requirements-dev.txt)" >&2
	exit 3
fi

dir=$(mktemp -d)
pid=""
cleanup() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$python" "$here/serve.py" --host 127.0.0.1 --port 0 --port-file "$dir/port" >"$dir/log" 2>&1 &
pid=$!
for _ in $(seq 1 150); do
	[ -s "$dir/port" ] && break
	if ! kill -0 "$pid" 2>/dev/null; then
		cat "$dir/log" >&2
		echo "emulator: failed to start" >&2
		exit 3
	fi
	sleep 0.1
done
if [ ! -s "$dir/port" ]; then
	cat "$dir/log" >&2
	echo "emulator: did not report a port within 15s" >&2
	exit 3
fi
port=$(cat "$dir/port")

export AWS_ENDPOINT_URL="http://127.0.0.1:$port"
export AWS_REGION=${AWS_REGION:-us-east-1}
export AWS_DEFAULT_REGION=${AWS_DEFAULT_REGION:-$AWS_REGION}
export AWS_ACCESS_KEY_ID=${AWS_ACCESS_KEY_ID:-test}
export AWS_SECRET_ACCESS_KEY=${AWS_SECRET_ACCESS_KEY:-test}
export CLAIMFIRST_EMULATOR=1
export CLAIMFIRST_EMULATOR_PID=$pid # benchmarks read its CPU time

if [ "$#" -eq 0 ]; then
	cat <<MSG
emulator: SQS and DynamoDB on $AWS_ENDPOINT_URL (pid $$, moto pid $pid); Ctrl-C or kill -TERM $$ stops it.
In another shell, paste these lines (the aws CLI v1 ignores AWS_ENDPOINT_URL: pass --endpoint-url "\$AWS_ENDPOINT_URL"; it also needs AWS_DEFAULT_REGION):
  export AWS_ENDPOINT_URL=$AWS_ENDPOINT_URL AWS_REGION=$AWS_REGION AWS_DEFAULT_REGION=$AWS_DEFAULT_REGION
  export AWS_ACCESS_KEY_ID=$AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY=$AWS_SECRET_ACCESS_KEY
MSG
	wait "$pid"
	exit $?
fi

set +e
"$@"
status=$?
set -e
exit $status
