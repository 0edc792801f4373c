#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Model-checks SEMQ's exactly-once handshake (tests/model/semq.pml) with
# Spin: builds the verifier (spin -a, gcc) and runs it over fault budgets.
#
#   safety    "invariant" in every reachable state (no effect twice, key
#             order, no confirmation or compaction without the effect) and
#             every assertion of the model: no faults, each fault alone,
#             every pair of faults and the cheap triples; 3 messages too
#   liveness  "delivered", "confirmed", "compacted", "relay_drained" under
#             weak fairness (pan -a -f), with no fault and each fault alone
#   cover     situations the properties must meet are reachable: a Data of
#             a compacted seq arriving, a held message, a relay's copy
#             delivered (each of these runs must find its "violation")
#   broken    three broken variants of the design must be caught: two
#             safety bugs, and the relay of before commit f3e1eeb that never
#             sent a lost copy again (a liveness bug)
#
# One line per check (states, memory, time), the counterexample trail of
# each property that fails, and a closing "model: N passed, M failed". Exits
# 1 when any check failed or could not finish, 2 on a usage error.
#
# Usage: check.sh [--full] [--keep]
#   --full  also every triple of faults and liveness over every pair
#           (minutes; up to 4 GiB per run)
#   --keep  keep the work directory (pan sources, every trail) and say where
# (--fix, from before f3e1eeb, is accepted and changes nothing: the model is
# the design as it is.)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
full=0
keep=0
while [ $# -gt 0 ]; do
	case "$1" in
	--full) full=1 ;;
	--fix) ;;
	--keep) keep=1 ;;
	-h | --help) sed -n '3,29p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "check.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
	esac
	shift
done

for tool in spin gcc; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "check.sh: '$tool' is not installed (tools/deps.sh installs it)" >&2
		exit 1
	fi
done

work=$(mktemp -d "${TMPDIR:-/tmp}/semq-model.XXXXXX")
on_exit() {
	if [ "$keep" = 1 ]; then
		echo "work directory kept: $work"
	else
		rm -rf "$work"
	fi
}
trap on_exit EXIT

memlim=1024 # MiB per pan run
hashw=22     # hash table of 2^22 slots: enough for the default runs
if [ "$full" = 1 ]; then
	memlim=4096
	hashw=26
fi
depth=100000 # steps; the deepest run needs a few hundred
faults=(LOSS DUPS REORDER DROPS CRASHES EARLY)
pass=0
fail=0
failed=()
declare -A shown=() # build:claim whose trail was printed already
t_start=$(date +%s)

# build NAME SPIN_DEFS... — a verifier in $work/NAME
build() {
	local name=$1 dir=$work/$1
	shift
	mkdir -p "$dir"
	cp "$here/semq.pml" "$dir/"
	echo "$*" >"$dir/defs"
	if ! (cd "$dir" && spin -a "$@" semq.pml >spin.log 2>&1); then
		cat "$dir/spin.log" >&2
		echo "check.sh: spin -a $* semq.pml failed" >&2
		exit 1
	fi
	if ! (cd "$dir" && gcc -O2 -DNFAIR=3 -DMEMLIM="$memlim" -o pan pan.c \
		>gcc.log 2>&1); then
		cat "$dir/gcc.log" >&2
		echo "check.sh: gcc of the verifier ($name) failed" >&2
		exit 1
	fi
}

# fault_env "LOSS DUPS" — SEMQ_LOSS=1 SEMQ_DUPS=1 SEMQ_REORDER=0 ...
fault_env() {
	local f v out=()
	for f in "${faults[@]}"; do
		v=0
		case " $1 " in *" $f "*) v=1 ;; esac
		out+=("SEMQ_$f=$v")
	done
	echo "${out[@]}"
}

# The same as -D macros, for a replay with spin -t.
fault_defs() {
	fault_env "$1" | sed 's/SEMQ_/-D/g'
}

label() {
	if [ -z "$1" ]; then echo "none"; else echo "$1" | tr ' ' '+'; fi
}

# The printf lines of a replayed trail, without Spin's chatter.
filter_trail() {
	grep -v -E '^ltl |^spin: warning|random simulations|^spin: important|=====|this model contains|these statements|is replayed in this way|which will likely|for an accurate replay|^c_code|getenv|char \*e;|^[[:space:]]*\}[[:space:]]*$|Never claim moves|^[[:space:]]*[0-9]+:[[:space:]]+proc|^[[:space:]]+[a-z_]+(\[[0-9]+\])? = |^#processes|processes created|^[[:space:]]*$' |
		sed 's/^[[:space:]]*/  | /'
}

# run BUILD MODE CLAIM FAULTS EXPECT — MODE safety|live, EXPECT hold|violate
run() {
	local b=$1 mode=$2 claim=$3 fl=$4 expect=$5 dir=$work/$1
	local args=(-m"$depth" -w"$hashw" -N "$claim") out errors states mem secs why=""
	local what ok=0 name envs defs
	[ "$mode" = live ] && args=(-a -f "${args[@]}")
	read -r -a envs <<<"$(fault_env "$fl")"
	rm -f "$dir/semq.pml.trail"
	out=$(cd "$dir" && env "${envs[@]}" ./pan "${args[@]}" 2>&1) || true
	errors=$(echo "$out" | sed -n 's/.*errors: \([0-9][0-9]*\).*/\1/p' | tail -1)
	states=$(echo "$out" | sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p')
	mem=$(echo "$out" | sed -n 's/^ *\([0-9.]*\).total actual memory usage.*/\1/p')
	secs=$(echo "$out" | sed -n 's/^pan: elapsed time \([0-9.e+-]*\) .*/\1/p')
	if [ -z "$errors" ]; then
		why="pan did not finish"
	elif echo "$out" | grep -q -E 'reached -DMEMLIM|max search depth too small'; then
		why="search incomplete (memory or depth bound)"
	elif [ "$expect" = hold ] && [ "$errors" = 0 ]; then
		ok=1
	elif [ "$expect" = violate ] && [ "$errors" != 0 ]; then
		ok=1
	elif [ "$expect" = hold ]; then
		why=$(echo "$out" | grep -m1 -E '^pan:[0-9]+:' | sed 's/^pan:[0-9]*: *//')
	else
		why="expected a violation, none found"
	fi
	what=$(printf '%-8s %-15s %-6s %-26s' "$mode" "$claim" "$b" "$(label "$fl")")
	if [ "$ok" = 1 ]; then
		pass=$((pass + 1))
		printf 'PASS %s %10s states %8s MB %6ss\n' "$what" "${states:-?}" \
			"${mem:-?}" "${secs:-?}"
	else
		fail=$((fail + 1))
		failed+=("$what: $why")
		printf 'FAIL %s %10s states %8s MB %6ss  %s\n' "$what" "${states:-?}" \
			"${mem:-?}" "${secs:-?}" "$why"
		if [ -z "$errors" ]; then
			echo "$out" | tail -20 | sed 's/^/  | /'
		fi
	fi
	if [ -f "$dir/semq.pml.trail" ]; then
		name="$dir/trail-$claim-$(label "$fl").txt"
		read -r -a defs <<<"$(cat "$dir/defs") $(fault_defs "$fl")"
		(cd "$dir" && spin -t "${defs[@]}" semq.pml 2>&1) |
			filter_trail >"$name" || true
		if [ "$ok" = 0 ] && [ -z "${shown[$b:$claim]:-}" ]; then
			shown[$b:$claim]=1
			echo "  counterexample ($b, faults: $(label "$fl")), spin -t:"
			head -n 150 "$name"
			if [ "$(wc -l <"$name")" -gt 150 ]; then
				echo "  | ... (--keep keeps the whole trail)"
			fi
		fi
	fi
	return 0
}

# Three faults at once pile up more frames on a connection than the default
# queue bound (12) holds.
q_def=()
[ "$full" = 1 ] && q_def=(-DQLEN=16)

echo "== $(spin -V | head -1); model: $here/semq.pml"
echo "== building verifiers"
build n2 -DNSEQ=2 "${q_def[@]}"
build n3 -DNSEQ=3 "${q_def[@]}"
build cover -DNSEQ=2 -DCOVER
build no_wm -DNSEQ=2 -DBROKEN_NO_WATERMARK_CHECK
build ack_early -DNSEQ=2 -DBROKEN_ACK_BEFORE_COMMIT
build no_resend -DNSEQ=2 -DBROKEN_RELAY_NO_RESEND

# Fault sets: none, each alone, every pair; the triples that stay small.
sets=("")
for ((a = 0; a < ${#faults[@]}; a++)); do
	sets+=("${faults[a]}")
done
pairs=()
for ((a = 0; a < ${#faults[@]}; a++)); do
	for ((c = a + 1; c < ${#faults[@]}; c++)); do
		pairs+=("${faults[a]} ${faults[c]}")
	done
done
triples=("LOSS DUPS REORDER" "LOSS DUPS EARLY" "LOSS REORDER EARLY"
	"DUPS REORDER EARLY")
if [ "$full" = 1 ]; then
	triples=()
	for ((a = 0; a < ${#faults[@]}; a++)); do
		for ((c = a + 1; c < ${#faults[@]}; c++)); do
			for ((d = c + 1; d < ${#faults[@]}; d++)); do
				triples+=("${faults[a]} ${faults[c]} ${faults[d]}")
			done
		done
	done
fi

echo "== safety: invariant and assertions in every state"
for fl in "${sets[@]}" "${pairs[@]}" "${triples[@]}"; do
	run n2 safety invariant "$fl" hold
done
for fl in "${sets[@]}"; do
	run n3 safety invariant "$fl" hold
done

echo "== liveness under weak fairness"
live_sets=("${sets[@]}")
[ "$full" = 1 ] && live_sets+=("${pairs[@]}")
for claim in delivered confirmed compacted relay_drained; do
	for fl in "${live_sets[@]}"; do
		run n2 live "$claim" "$fl" hold
	done
done

echo "== cover: reachable situations (a violation expected)"
run cover safety cover_late_dup "DUPS REORDER" violate
run cover safety cover_held "LOSS" violate
run cover safety cover_copy "" violate

echo "== broken variants (a violation expected)"
run no_wm safety invariant "DUPS REORDER" violate
run ack_early safety invariant "CRASHES" violate
run no_resend live delivered "DROPS" violate

echo "== $(($(date +%s) - t_start)) s"
if [ "$fail" -gt 0 ]; then
	echo "failed:"
	printf '  %s\n' "${failed[@]}"
fi
echo "model: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
