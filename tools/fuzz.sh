#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds SEMQ's libFuzzer targets (tests/fuzz) with clang, ASan and UBSan in
# build/fuzz and runs each for a bounded time, printing its executions.
#
#   tools/fuzz.sh [--seconds N] [--runs N] [--werror] [TARGET...]
#
#   --seconds N  run each target at most N seconds (default 20)
#   --runs N     ... and at most N inputs (default: no limit)
#   --werror     a compiler warning fails the build (-DSEMQ_WERROR=ON; tools/test.sh)
#   TARGET       frame, config, bill, proto (default: all four)
#
# Each target starts from its seeds (tests/fuzz/corpus/TARGET) and the inputs
# that once crashed it (tests/fuzz/crashes/TARGET: a crash stays fixed), and
# keeps what it learns in build/fuzz/corpus/TARGET. A new crashing input is
# written to build/fuzz/artifacts/TARGET/. Exit status 1 when a target
# crashed (or leaked, or hit an invariant), 2 on a usage error.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

all_targets=(frame config bill proto)
seconds=20
runs=-1
werror=OFF
targets=()
while [ $# -gt 0 ]; do
	case "$1" in
	--seconds) shift; seconds=${1:-} ;;
	--runs) shift; runs=${1:-} ;;
	--werror) werror=ON ;;
	-h | --help) sed -n '3,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	-*) echo "tools/fuzz.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
	*) targets+=("$1") ;;
	esac
	shift
done
case "$seconds" in '' | *[!0-9]*)
	echo "tools/fuzz.sh: --seconds wants a number of seconds, not '$seconds'" >&2
	exit 2 ;;
esac
case "$runs" in -1) ;; '' | *[!0-9]*)
	echo "tools/fuzz.sh: --runs wants a number of inputs, not '$runs'" >&2
	exit 2 ;;
esac
[ ${#targets[@]} -eq 0 ] && targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
	case " ${all_targets[*]} " in *" $t "*) ;; *)
		echo "tools/fuzz.sh: unknown target '$t' (${all_targets[*]})" >&2
		exit 2 ;;
	esac
done

# clang and its fuzzer runtime come from tools/deps.sh like everything else;
# a machine where they still do not link is an error, never a silent skip.
. tools/deps.sh
semq_install_deps
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n);
int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return d && n ? 0 : 0; }' >"$probe/p.c"
if ! clang -fsanitize=fuzzer,address,undefined "$probe/p.c" -o "$probe/p" >"$probe/log" 2>&1; then
	cat "$probe/log" >&2
	echo "tools/fuzz.sh: clang cannot link -fsanitize=fuzzer (is libclang-rt-14-dev installed? see tools/deps.sh)" >&2
	exit 1
fi

dir=build/fuzz
mkdir -p "$dir"
jobs=$(nproc 2>/dev/null || echo 2)
echo "==> configure $dir"
cmake -S "$root" -B "$dir" -DCMAKE_C_COMPILER=clang -DSEMQ_FUZZ=ON -DSEMQ_TESTS=OFF \
	-DSEMQ_WERROR="$werror" -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$dir.configure.log" 2>&1 ||
	{ cat "$dir.configure.log"; exit 1; }
echo "==> build $dir"
cmake --build "$dir" -j "$jobs" --target $(printf 'fuzz_%s ' "${targets[@]}") \
	>"$dir.build.log" 2>&1 ||
	{ grep -E 'error|warning|Error' "$dir.build.log" | head -50; exit 1; }

# Temporary files of the targets, in a directory of this run removed at the
# end (a crashing target leaves its own behind): in memory when there is
# some, much faster than a disk for a database written thousands of times a
# second.
tmpbase=/dev/shm
[ -d "$tmpbase" ] && [ -w "$tmpbase" ] || tmpbase=$root/$dir
TMPDIR=$(mktemp -d "$tmpbase/semq-fuzz.XXXXXX")
export TMPDIR
trap 'rm -rf "$probe" "$TMPDIR"' EXIT

failed=()
for t in "${targets[@]}"; do
	bin="$dir/tests/fuzz/fuzz_$t"
	work="$dir/corpus/$t"
	art="$dir/artifacts/$t"
	log="$dir/fuzz_$t.log"
	dict=tests/fuzz/$t.dict
	[ "$t" = proto ] && dict=tests/fuzz/frame.dict
	mkdir -p "$work" "$art"
	dirs=("$work" "tests/fuzz/corpus/$t")
	[ -d "tests/fuzz/crashes/$t" ] && dirs+=("tests/fuzz/crashes/$t")
	echo "==> fuzz $t (${seconds}s)"
	rc=0
	"$bin" -max_total_time="$seconds" -runs="$runs" -timeout=30 \
		-dict="$dict" -artifact_prefix="$art/" -print_final_stats=1 \
		"${dirs[@]}" >"$log" 2>&1 || rc=$?
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
	if [ "$rc" -ne 0 ]; then
		grep -E 'invariant broken|ERROR: |runtime error|SUMMARY|Test unit written' "$log" | head -20
		echo "fuzz_$t: FAILED after ${execs:-?} executions (exit $rc; log $log)"
		failed+=("$t")
	else
		echo "fuzz_$t: ${execs:-?} executions, no crash"
	fi
done
if [ ${#failed[@]} -ne 0 ]; then
	echo "fuzz: ${#targets[@]} targets ran, ${#failed[@]} crashed (${failed[*]})"
	exit 1
fi
echo "fuzz: ${#targets[@]} targets ran, none crashed"
