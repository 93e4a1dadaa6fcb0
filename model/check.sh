#!/usr/bin/env bash
# Model-check the claim protocol (model/claim.pml) with SPIN: every
# configuration must verify with no error, exhaustively, and every mutant
# (the protocol with one safeguard removed) must yield a counterexample that
# violates the property it is expected to. Prints, per run, the states stored,
# the transitions, the depth, the memory and the time, and for a mutant the
# property violated and the counterexample's events.
#
# Usage: model/check.sh [-v] [NAME...]   (no NAME: every run but the extra ones; -v: full pan output)
#
# Each verifier is compiled with the machine's gcc and run exhaustively: no
# bitstate hashing, no hash compaction (-DCOLLAPSE compresses states without
# loss), and a depth limit far above the deepest path (a truncated search
# fails the check).
set -euo pipefail

cd "$(dirname "$0")"
model=$PWD/claim.pml

# name | spin -D flags | kind (safety, liveness) | expected: pass, or the property a mutant violates
runs=(
	"safety-2w2k|-DNW=2 -DNK=2 -DCRASHES=1 -DLOSTS=1 -DFAILS=0 -DSTALLS=0 -DDUPS=0|safety|pass"
	"safety-3w1k|-DNW=3 -DNK=1 -DCRASHES=1 -DLOSTS=1 -DFAILS=1 -DSTALLS=1 -DDUPS=0|safety|pass"
	"safety-2w1k|-DNW=2 -DNK=1 -DCRASHES=1 -DLOSTS=1 -DFAILS=1 -DSTALLS=1 -DDUPS=1|safety|pass"
	"liveness-2w1k|-DNW=2 -DNK=1 -DCRASHES=1 -DLOSTS=1 -DFAILS=1 -DSTALLS=1 -DDUPS=0 -DLIVE -DNOEXPIRY|liveness|pass"
	"mutant-complete-without-acq|-DNW=2 -DNK=1 -DDUPS=1 -DMUT_NOACQ|safety|P3 holder"
	"mutant-takeover-without-token|-DNW=2 -DNK=1 -DDUPS=1 -DMUT_NOTOKEN|safety|P6 fencing"
	"mutant-no-release-on-failure|-DNW=2 -DNK=1 -DDUPS=1 -DMUT_NORELEASE|safety|P5 no orphan"
	"mutant-retention-below-redelivery|-DNW=2 -DNK=1 -DDUPS=1 -DRET=2|safety|P1 money"
	"mutant-skew-above-margin|-DNW=2 -DNK=1 -DDUPS=1 -DSKEW=2|safety|P1 money"
	"mutant-lease-never-expires|-DNW=2 -DNK=1 -DDUPS=0 -DLIVE -DNOEXPIRY -DMUT_NOLEASEEXPIRY|liveness|liveness"
)
# runs too long for every make test (minutes, over half a gigabyte): only by name
extra=(
	"safety-2w2k-faults|-DNW=2 -DNK=2 -DCRASHES=1 -DLOSTS=1 -DFAILS=1 -DSTALLS=1 -DDUPS=0|safety|pass"
)

verbose=0
if [[ ${1:-} == -v ]]; then
	verbose=1
	shift
fi

if ! command -v spin >/dev/null || ! command -v gcc >/dev/null; then
	echo "model: spin and gcc are needed (Debian: apt-get install spin gcc; or make tools)" >&2
	exit 3
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/claimmodel.XXXXXX")
# built verifiers, by the hash of what they were built from (MODEL_CACHE= to build afresh)
cache=${MODEL_CACHE-${XDG_CACHE_HOME:-$HOME/.cache}/claimfirst-model}
[[ -n $cache ]] || cache=$work/cache
trap 'rm -rf "$work"' EXIT

# property names the assertions' text to the properties of the note
property() {
	case "$1" in
	*"money["*) echo "P1 money" ;;
	*"ledger["*) echo "P2 ledger" ;;
	*"racq[k]==a"*) echo "P3 holder" ;;
	*"rexp[k]<="*) echo "P4 retained" ;;
	*"orph["*) echo "P5 no orphan" ;;
	*"seen+1"*) echo "P6 fencing" ;;
	*"acceptance cycle"*) echo "liveness" ;;
	*"invalid end state"*) echo "deadlock" ;;
	*) echo "unknown: $1" ;;
	esac
}

# one verifies run $1 in its own directory and writes its verdict there:
# report (what to print) and status (0 or 1).
one() {
	local name flags kind expect dir out opt errors stored trans depth mem secs stats what got t0=$SECONDS
	IFS='|' read -r name flags kind expect <<<"$1"
	dir=$work/$name
	out=$dir/pan.out
	mkdir -p "$dir"
	cp "$model" "$dir/claim.pml"
	exec >"$dir/report" 2>&1
	echo 1 >"$dir/status"
	local cc=(-DCOLLAPSE) pan=(-m1000000)
	if [[ $kind == safety ]]; then
		cc+=(-DSAFETY)
	else
		cc+=(-DNFAIR=3)
		pan+=(-a -f)
	fi
	# a mutant's search stops at its first counterexample: build it fast
	opt=-O1
	if [[ $expect == pass ]]; then
		pan+=(-w22)
	else
		opt=-O0
		pan+=(-w19)
	fi
	# a verifier is reused while the model, the flags and the tools are the same
	local key cached=""
	key=$({ cat "$model"; echo "$flags|$opt|${cc[*]}"; spin -V; gcc --version; } 2>&1 | sha256sum | cut -c1-32)
	if [[ -x $cache/$key ]]; then
		cp "$cache/$key" "$dir/pan"
		cached=", verifier cached"
	else
		# shellcheck disable=SC2086 # flags are words
		(cd "$dir" && spin -a $flags claim.pml >spin.out 2>&1) || {
			echo "FAIL $name: spin -a $flags"
			cat "$dir/spin.out"
			return
		}
		(cd "$dir" && gcc "$opt" -w "${cc[@]}" -o pan pan.c) || {
			echo "FAIL $name: gcc"
			return
		}
		if mkdir -p "$cache" 2>/dev/null && cp "$dir/pan" "$cache/$key.$BASHPID" 2>/dev/null; then
			mv "$cache/$key.$BASHPID" "$cache/$key"
		fi
	fi
	(cd "$dir" && ./pan "${pan[@]}" >pan.out 2>&1) || true
	[[ $verbose == 1 ]] && cat "$out"
	errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$out")
	stored=$(sed -n 's/^ *\([0-9e.+]*\) states, stored.*/\1/p' "$out")
	trans=$(sed -n 's/^ *\([0-9e.+]*\) transitions.*/\1/p' "$out")
	depth=$(sed -n 's/.*depth reached \([0-9]*\).*/\1/p' "$out")
	mem=$(sed -n 's/^ *\([0-9.]*\)\s*total actual memory usage.*/\1/p' "$out")
	secs=$(sed -n 's/^pan: elapsed time \([0-9.e+]*\).*/\1/p' "$out")
	stats="states stored ${stored:-?}, transitions ${trans:-?}, depth ${depth:-?}, memory ${mem:-?} MB, search ${secs:-?} s ($kind; $((SECONDS - t0)) s with the build$cached)"
	if grep -q "max search depth too small" "$out"; then
		echo "FAIL $name: the search was truncated: $stats"
		return
	fi
	if [[ -z $errors ]]; then
		echo "FAIL $name: no verdict from pan"
		cat "$out"
		return
	fi
	if [[ $expect == pass ]]; then
		if [[ $errors == 0 ]]; then
			echo "ok   $name: no error: $stats"
			echo 0 >"$dir/status"
		else
			echo "FAIL $name: $(grep -m1 -E 'violated|cycle|invalid end' "$out" || true)"
			# shellcheck disable=SC2086 # flags are words
			(cd "$dir" && spin -T -t $flags claim.pml | grep -E '^MSC:|assertion violated|START OF CYCLE' | sed 's/^MSC: //; s/^/       /') || true
		fi
		return
	fi
	if [[ $errors == 0 ]]; then
		echo "FAIL $name: no counterexample found, expected one violating $expect: $stats"
		return
	fi
	what=$(grep -m1 -E 'assertion violated|acceptance cycle|invalid end state' "$out" || true)
	got=$(property "$what")
	if [[ $got != "$expect" ]]; then
		echo "FAIL $name: counterexample violates $got, expected $expect: $what"
	else
		echo "ok   $name: counterexample violates $got: $stats"
		echo 0 >"$dir/status"
	fi
	# the counterexample's events, replayed from the trail
	# shellcheck disable=SC2086 # flags are words
	(cd "$dir" && spin -T -t $flags claim.pml | grep -E '^MSC:|assertion violated|START OF CYCLE' | sed 's/^MSC: //; s/^/       /') || true
}

# every run at once: the builds and the small searches overlap the large one
start=$SECONDS
names=()
for run in "${runs[@]}" "${extra[@]}"; do
	name=${run%%|*}
	if [[ $# -gt 0 && " $* " != *" $name "* ]] || [[ $# == 0 && " ${extra[*]} " == *" $run "* ]]; then
		continue
	fi
	names+=("$name")
	one "$run" &
done
wait
failed=0
for name in "${names[@]}"; do
	cat "$work/$name/report"
	[[ $(cat "$work/$name/status") == 0 ]] || failed=1
done
echo "model: ${#names[@]} runs, $((SECONDS - start)) s in all"
exit "$failed"
