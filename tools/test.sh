#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs every test of SEMQ on a fresh Debian 12 machine: installs what is
# missing, checks formatting, builds with -Wall -Wextra -Werror and runs the
# suite with ctest; then builds again with AddressSanitizer and
# UndefinedBehaviorSanitizer and runs the suite once more.
#
#   tools/test.sh            everything
#   tools/test.sh --no-asan  skip the sanitizer pass (quicker, for development)
#   tools/test.sh -R REGEX   only the ctest tests matching REGEX
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

asan=1
ctest_args=()
while [ $# -gt 0 ]; do
	case "$1" in
	--no-asan) asan=0 ;;
	-R) shift; ctest_args+=(-R "$1") ;;
	-h | --help) sed -n '3,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "tools/test.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
	esac
	shift
done

. tools/deps.sh
semq_install_deps

tools/check-format.sh

jobs=$(nproc 2>/dev/null || echo 2)
run_suite() { # DIR CMAKE_ARGS...
	local dir=$1
	shift
	echo "==> configure $dir"
	cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >"$dir.configure.log" 2>&1 ||
		{ cat "$dir.configure.log"; return 1; }
	echo "==> build $dir"
	cmake --build "$dir" -j "$jobs" >"$dir.build.log" 2>&1 ||
		{ grep -E 'error|warning|Error' "$dir.build.log" | head -50; return 1; }
	echo "==> test $dir"
	# One more test than cores: the integration tests mostly wait (on
	# fsync, on timers), so this keeps both cores busy.
	ctest --test-dir "$dir" --output-on-failure -j "$((jobs + 1))" "${ctest_args[@]}"
}

mkdir -p build
run_suite build/default
if [ "$asan" = 1 ]; then
	export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
	export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
	run_suite build/asan -DSEMQ_SANITIZE=ON
fi
# Every fuzz target for a bounded time, from its corpus and past crashes
# (a long run: tools/fuzz.sh --runs 10000000).
tools/fuzz.sh --seconds 10
echo "==> all tests passed"
