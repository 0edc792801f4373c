#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Model-checks SEMQ's exactly-once handshake (tests/model/semq.pml) with
# Spin: builds the verifiers (spin -a, gcc) and runs them over fault budgets.
#
#   safety    "invariant" in every reachable state (no effect twice, key
#             order, no confirmation or compaction without the effect) and
#             every assertion of the model: no faults, each fault alone,
#             every pair of faults and the cheap triples; 3 messages too
#   liveness  "delivered", "confirmed", "compacted", "relay_drained" under
#             weak fairness (pan -a -f), with no fault and each fault alone
#   lives     the model with digests and lives (-DLIVES): a restore of the
#             origin's database (RESTORES) and a re-image (REIMAGES), alone
#             and with the faults whose state space fits (safety), and the
#             liveness properties with each event (docs/PROTOCOL.md "Lives
#             of a node")
#   limit     a documented limit must show: after a restore, the watermark
#             may never pass a seq that was handed out and then renumbered
#   cover     situations the properties must meet are reachable: a Data of
#             a compacted seq arriving, a held message, a relay's copy
#             delivered, a CONFLICT renumbering a row, a prev_digest refusal
#             (each of these runs must find its "violation")
#   broken    broken variants of the design must be caught: two safety bugs,
#             the relay of before commit f3e1eeb that never sent a lost copy
#             again (liveness), a receiver without digests (safety), and
#             three behaviours of node/proto.c at 88517c5 that the lives
#             model found (a verdict recorded for another message, endless
#             renumbering, a relay's copy never taken back)
#
# One line per check (states, memory, time), the counterexample trail of
# each property that fails, and a closing "model: N passed, M failed". Exits
# 1 when any check failed or could not finish, 2 on a usage error.
#
# Usage: check.sh [--full] [--keep]
#   --full  also every triple of faults, liveness over every pair, and the
#           lives checks with the faults that take millions of states
#           (tens of minutes; up to 8 GiB per run)
#   --keep  keep the work directory (pan sources, every trail) and say where
# SEMQ_MODEL_JOBS: how many pan runs (and builds) at once, default 2 (1 with
# --full); the lines come out in order either way.
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
	-h | --help) sed -n '4,43p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
	kill $(jobs -p) 2>/dev/null || true
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
	memlim=8192
	hashw=26
fi
depth=100000 # steps; the deepest run needs a few hundred
# pan runs (and builds) at once: SEMQ_MODEL_JOBS, else 2 (1 with --full,
# whose runs take up to 8 GiB each)
lanes=${SEMQ_MODEL_JOBS:-2}
[ "$full" = 1 ] && lanes=${SEMQ_MODEL_JOBS:-1}
case "$lanes" in
'' | *[!0-9]* | 0) echo "check.sh: SEMQ_MODEL_JOBS='$lanes': a number >= 1" >&2; exit 2 ;;
esac
faults=(LOSS DUPS REORDER DROPS CRASHES EARLY)
budgets=("${faults[@]}" RESTORES REIMAGES) # the last two: -DLIVES only
pass=0
fail=0
failed=()
declare -A shown=() # build:claim whose trail was printed already
t_start=$(date +%s)

# build NAME SPIN_DEFS... — a verifier in $work/NAME (spin -a, gcc); "ok"
# in $work/NAME/built when it is ready. Builds run in the background,
# `lanes` at a time; build_wait reports the first that failed.
build() {
	local name=$1 dir=$work/$1
	shift
	mkdir -p "$dir"
	cp "$here/semq.pml" "$dir/"
	echo "$*" >"$dir/defs"
	while [ "$(jobs -rp | wc -l)" -ge "$lanes" ]; do wait -n || true; done
	(
		if ! (cd "$dir" && spin -a "$@" semq.pml >spin.log 2>&1); then
			echo "spin -a $* semq.pml failed" >"$dir/built"
		elif ! (cd "$dir" && gcc -O2 -DNFAIR=3 -DMEMLIM="$memlim" \
			-o pan pan.c >gcc.log 2>&1); then
			echo "gcc of the verifier ($name) failed" >"$dir/built"
		else
			echo ok >"$dir/built"
		fi
	) &
}

build_wait() {
	local dir
	wait
	for dir in "$work"/*/; do
		[ -f "$dir/defs" ] || continue
		if [ "$(cat "$dir/built" 2>/dev/null)" != ok ]; then
			if [ -f "$dir/gcc.log" ]; then
				tail -n 20 "$dir/gcc.log" >&2
			elif [ -f "$dir/spin.log" ]; then
				grep -v '^ltl ' "$dir/spin.log" | head -n 20 >&2 || true
			fi
			echo "check.sh: $(cat "$dir/built" 2>/dev/null || echo "build of $dir did not finish")" >&2
			exit 1
		fi
	done
}

# fault_env "LOSS DUPS" — SEMQ_LOSS=1 SEMQ_DUPS=1 SEMQ_REORDER=0 ...
fault_env() {
	local f v out=()
	for f in "${budgets[@]}"; do
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
# section TEXT — a heading. Both are queued; run_all runs the checks,
# `lanes` at a time, and prints every line in the order queued.
queue=()
run() { queue+=("C|$1|$2|$3|$4|$5"); }
section() { queue+=("S|$1"); }

# check_one K BUILD MODE CLAIM FAULTS EXPECT — one pan run in its own
# directory; its results in $work/res/K.*, K.done last.
check_one() {
	set +e
	local k=$1 b=$2 mode=$3 claim=$4 fl=$5 expect=$6 dir=$work/$2
	local rdir=$work/run/$1 res=$work/res/$1
	local args=(-m"$depth" -w"$hashw" -N "$claim") out errors states mem secs why=""
	local what ok=0 name envs defs
	[ "$mode" = live ] && args=(-a -f "${args[@]}")
	read -r -a envs <<<"$(fault_env "$fl")"
	mkdir -p "$rdir"
	out=$(cd "$rdir" && env "${envs[@]}" "$dir/pan" "${args[@]}" 2>&1)
	errors=$(echo "$out" | sed -n 's/.*errors: \([0-9][0-9]*\).*/\1/p' | tail -1)
	states=$(echo "$out" | sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p')
	mem=$(echo "$out" | sed -n 's/^ *\([0-9.]*\).total actual memory usage.*/\1/p')
	secs=$(echo "$out" | sed -n 's/^pan: elapsed time \([0-9.e+-]*\) .*/\1/p')
	if [ -z "$errors" ]; then
		why="pan did not finish"
		echo "$out" | tail -20 | sed 's/^/  | /' >"$res.tail"
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
	what=$(printf '%-8s %-19s %-10s %-26s' "$mode" "$claim" "$b" "$(label "$fl")")
	if [ "$ok" = 1 ]; then
		printf 'PASS %s %10s states %8s MB %6ss\n' "$what" "${states:-?}" \
			"${mem:-?}" "${secs:-?}" >"$res.line"
	else
		printf 'FAIL %s %10s states %8s MB %6ss  %s\n' "$what" "${states:-?}" \
			"${mem:-?}" "${secs:-?}" "$why" >"$res.line"
		echo "$what: $why" >"$res.why"
	fi
	if [ -f "$rdir/semq.pml.trail" ]; then
		name="$dir/trail-$claim-$(label "$fl").txt"
		cp "$dir/semq.pml" "$rdir/"
		read -r -a defs <<<"$(cat "$dir/defs") $(fault_defs "$fl")"
		(cd "$rdir" && spin -t "${defs[@]}" semq.pml 2>&1) |
			filter_trail >"$name"
		echo "$name" >"$res.trail"
	fi
	[ "$keep" = 1 ] || rm -rf "$rdir"
	echo "$ok" >"$res.ok"
	touch "$res.done"
}

run_all() {
	local k n=${#queue[@]} producer name b claim fl
	local -a f
	mkdir -p "$work/res" "$work/run"
	(
		for ((k = 0; k < n; k++)); do
			[ "${queue[k]:0:1}" = C ] || continue
			IFS='|' read -r -a f <<<"${queue[k]}"
			while [ "$(jobs -rp | wc -l)" -ge "$lanes" ]; do
				wait -n || true
			done
			check_one "$k" "${f[1]}" "${f[2]}" "${f[3]}" "${f[4]:-}" \
				"${f[5]}" &
		done
		wait
	) &
	producer=$!
	for ((k = 0; k < n; k++)); do
		IFS='|' read -r -a f <<<"${queue[k]}"
		if [ "${f[0]}" = S ]; then
			echo "== ${f[1]}"
			continue
		fi
		while [ ! -e "$work/res/$k.done" ]; do
			if ! kill -0 "$producer" 2>/dev/null &&
				[ ! -e "$work/res/$k.done" ]; then
				echo "0" >"$work/res/$k.ok"
				echo "FAIL ${queue[k]}: the check did not run" \
					>"$work/res/$k.line"
				echo "${queue[k]}: the check did not run" >"$work/res/$k.why"
				touch "$work/res/$k.done"
				break
			fi
			sleep 0.1
		done
		cat "$work/res/$k.line"
		if [ "$(cat "$work/res/$k.ok")" = 1 ]; then
			pass=$((pass + 1))
			continue
		fi
		fail=$((fail + 1))
		failed+=("$(cat "$work/res/$k.why")")
		[ -f "$work/res/$k.tail" ] && cat "$work/res/$k.tail"
		b=${f[1]}
		claim=${f[3]}
		fl=${f[4]:-}
		if [ -f "$work/res/$k.trail" ] && [ -z "${shown[$b:$claim]:-}" ]; then
			shown[$b:$claim]=1
			name=$(cat "$work/res/$k.trail")
			echo "  counterexample ($b, faults: $(label "$fl")), spin -t:"
			head -n 150 "$name"
			if [ "$(wc -l <"$name")" -gt 150 ]; then
				echo "  | ... (--keep keeps the whole trail)"
			fi
		fi
	done
	wait "$producer" || true
}

# Three faults at once pile up more frames on a connection than the default
# queue bound (12) holds.
q_def=()
[ "$full" = 1 ] && q_def=(-DQLEN=16)

echo "== $(spin -V | head -1); model: $here/semq.pml"
echo "== building verifiers ($lanes at a time)"
build n2 -DNSEQ=2 "${q_def[@]}"
build n3 -DNSEQ=3 "${q_def[@]}"
build cover -DNSEQ=2 -DCOVER
build no_wm -DNSEQ=2 -DBROKEN_NO_WATERMARK_CHECK
build ack_early -DNSEQ=2 -DBROKEN_ACK_BEFORE_COMMIT
build no_resend -DNSEQ=2 -DBROKEN_RELAY_NO_RESEND
# With digests and lives. r12: a restore with 1 message in the lost
# timeline and 2 after it (renumbering a chain, prev_digest refusals);
# r21: 2 lost, 1 after (a lost message whose predecessor is lost); i21:
# a re-image (two lives) with 2 messages of the first life and 1 of the
# second, restores possible too.
lives_r12=(-DLIVES -DNSEQ=1 -DNNEW=2 -DMAXSEQ=5 -DQLEN=16)
lives_r21=(-DLIVES -DNSEQ=2 -DNNEW=1 -DMAXSEQ=5 -DQLEN=16)
lives_i21=(-DLIVES -DNLIFE=2 -DNSEQ=2 -DNNEW=1 -DMAXSEQ=5 -DQLEN=16)
build r12 "${lives_r12[@]}"
build r21 "${lives_r21[@]}"
build i21 "${lives_i21[@]}"
build lcover "${lives_r12[@]}" -DCOVER
build no_digest "${lives_r12[@]}" -DBROKEN_NO_DIGEST
build verdict "${lives_r12[@]}" -DBROKEN_VERDICT_NO_DIGEST
build renumber "${lives_r12[@]}" -DBROKEN_RENUMBER_FROM_REFUSED
build retract "${lives_r12[@]}" -DBROKEN_RETRACT_ONCE
build_wait

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

section "safety: invariant and assertions in every state"
for fl in "${sets[@]}" "${pairs[@]}" "${triples[@]}"; do
	run n2 safety invariant "$fl" hold
done
for fl in "${sets[@]}"; do
	run n3 safety invariant "$fl" hold
done

section "liveness under weak fairness"
live_sets=("${sets[@]}")
[ "$full" = 1 ] && live_sets+=("${pairs[@]}")
for claim in delivered confirmed compacted relay_drained; do
	for fl in "${live_sets[@]}"; do
		run n2 live "$claim" "$fl" hold
	done
done

section "lives: restores and re-images, safety"
# a restore with each fault that stays under a few million states (a cut
# or a crash: 7-8.5 M states, 2.5-3 GB: --full)
r_faults=(LOSS DUPS REORDER EARLY)
[ "$full" = 1 ] && r_faults+=(DROPS CRASHES)
run r12 safety invariant "RESTORES" hold
for f in "${r_faults[@]}"; do
	run r12 safety invariant "RESTORES $f" hold
done
run r21 safety invariant "RESTORES" hold
if [ "$full" = 1 ]; then
	for f in LOSS DUPS REORDER EARLY; do # 10-15 M states, up to 5 GB
		run r21 safety invariant "RESTORES $f" hold
	done
	run i21 safety invariant "REIMAGES RESTORES" hold # 11 M states
fi
run i21 safety invariant "REIMAGES" hold
for f in "${faults[@]}"; do
	run i21 safety invariant "REIMAGES $f" hold
done

section "lives: liveness under weak fairness"
for claim in delivered confirmed relay_drained; do
	run r12 live "$claim" "RESTORES" hold
	if [ "$full" = 1 ]; then
		for f in "${faults[@]}"; do # up to 12 M states, 4 minutes
			run r12 live "$claim" "RESTORES $f" hold
		done
		run r21 live "$claim" "RESTORES" hold # 25 s each
	fi
done
for claim in delivered confirmed compacted relay_drained; do
	run i21 live "$claim" "REIMAGES" hold
	run i21 live "$claim" "REIMAGES LOSS" hold
	if [ "$full" = 1 ]; then
		for f in DUPS REORDER DROPS CRASHES EARLY; do
			run i21 live "$claim" "REIMAGES $f" hold
		done
	fi
done

section "limit: documented, must show (a violation expected)"
# a renumbered seq nobody fills: the watermark stops below it for good
run r12 live compacted "RESTORES" violate

section "cover: reachable situations (a violation expected)"
run cover safety cover_late_dup "DUPS REORDER" violate
run cover safety cover_held "LOSS" violate
run cover safety cover_copy "" violate
run lcover safety cover_conflict "RESTORES" violate
run lcover safety cover_prev_conflict "RESTORES" violate

section "broken variants (a violation expected)"
run no_wm safety invariant "DUPS REORDER" violate
run ack_early safety invariant "CRASHES" violate
run no_resend live delivered "DROPS" violate
run no_digest safety invariant "RESTORES" violate
run verdict safety invariant "RESTORES" violate
run renumber safety invariant "RESTORES LOSS" violate
run retract live relay_drained "RESTORES LOSS" violate

run_all
echo "== $(($(date +%s) - t_start)) s"
if [ "$fail" -gt 0 ]; then
	echo "failed:"
	printf '  %s\n' "${failed[@]}"
fi
echo "model: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
