#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs every test of SEMQ on a fresh Debian 12 machine: installs what is
# missing, checks formatting, builds with gcc (RelWithDebInfo) and runs the
# suite with ctest; then builds again with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer and runs the suite once more; then the fuzz
# targets for a few seconds each, while a gcc Release build (-O3, no crash
# points: what a packager builds) compiles every target and runs the unit
# tests. Every build is -DSEMQ_WERROR=ON: a warning of gcc or clang, at any
# optimisation level, fails the run. Each suite gets a throw-away PostgreSQL
# cluster (tools/pgcluster.sh) for the PostgreSQL tests, named to them in
# SEMQ_TEST_PG_URL and removed at exit, also on failure; a cluster that
# cannot start fails the run with a banner saying why. Each step prints how
# long it took ("==> STEP took N s").
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
	-h | --help) sed -n '3,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "tools/test.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
	esac
	shift
done

# How long the step that just ended took ("==> STEP took N s"); starts the
# clock of the next one.
clock=$SECONDS
took() {
	echo "==> $1 took $((SECONDS - clock)) s"
	clock=$SECONDS
}

. tools/deps.sh
semq_install_deps
semq_install_promtool
took "dependencies"

tools/check-format.sh
took "format check"

jobs=$(nproc 2>/dev/null || echo 2)

# The PostgreSQL cluster of the suite running now ("" when none): started by
# pg_start, stopped by pg_stop, and by the EXIT trap whatever happens.
pg_dir=""
pg_stop() {
	[ -n "$pg_dir" ] || return 0
	tools/pgcluster.sh stop "$pg_dir" ||
		echo "tools/test.sh: warning: could not stop the PostgreSQL cluster in $pg_dir" >&2
	pg_dir=""
	unset SEMQ_TEST_PG_URL
}
# The Release build running in the background beside the fuzzing ("" when
# none): stopped with its compilers and tests if the run ends first.
release_pid=""
on_exit() {
	[ -z "$release_pid" ] || kill -- "-$release_pid" 2>/dev/null || true
	pg_stop
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
pg_cannot_run() { # WHY
	local bar='!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!'
	printf '%s\n!! POSTGRESQL TESTS CANNOT RUN: %s\n%s\n' "$bar" "$1" "$bar" >&2
	exit 1
}
pg_start() {
	local url
	pg_dir=$(mktemp -d "${TMPDIR:-/tmp}/semq-pg.XXXXXX") ||
		pg_cannot_run "no temporary directory for the cluster"
	echo "==> start a PostgreSQL cluster in $pg_dir"
	if ! url=$(tools/pgcluster.sh start "$pg_dir" 2>"$pg_dir.log"); then
		cat "$pg_dir.log" >&2
		rm -f "$pg_dir.log"
		rmdir "$pg_dir" 2>/dev/null || true
		pg_dir=""
		pg_cannot_run "tools/pgcluster.sh start failed (its messages above)"
	fi
	rm -f "$pg_dir.log"
	case "$url" in
	postgresql://*) ;;
	*) pg_cannot_run "tools/pgcluster.sh start printed '$url', not a postgresql:// URL" ;;
	esac
	psql -X -q -c "SELECT 1" "$url" >/dev/null 2>&1 ||
		pg_cannot_run "the cluster in $pg_dir does not answer at $url"
	export SEMQ_TEST_PG_URL=$url
	echo "==> SEMQ_TEST_PG_URL=$url"
}

# Configures DIR for the compiler CC (RelWithDebInfo unless CMAKE_ARGS say
# otherwise; warnings are errors) and builds every target. A cache made for
# another compiler is removed first: CMake would start it afresh itself, but
# without the -D options of this command line.
configure_build() { # DIR CC CMAKE_ARGS...
	local dir=$1 cc=$2 cached
	shift 2
	echo "==> configure $dir ($cc)"
	if [ -f "$dir/CMakeCache.txt" ]; then
		cached=$(sed -n 's/^CMAKE_C_COMPILER:[A-Z]*=//p' "$dir/CMakeCache.txt")
		[ "$cached" = "$(command -v "$cc")" ] || rm -rf "$dir/CMakeCache.txt" "$dir/CMakeFiles"
	fi
	cmake -S "$root" -B "$dir" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
		-DSEMQ_WERROR=ON "$@" >"$dir.configure.log" 2>&1 ||
		{ cat "$dir.configure.log"; return 1; }
	took "configure $dir"
	echo "==> build $dir"
	cmake --build "$dir" -j "$jobs" >"$dir.build.log" 2>&1 ||
		{ grep -E 'error|warning|Error' "$dir.build.log" | head -50; return 1; }
	took "build $dir"
}

run_suite() { # DIR CC CMAKE_ARGS...
	local dir=$1
	configure_build "$@"
	echo "==> test $dir"
	# One more test than cores: the integration tests mostly wait (on
	# fsync, on timers), so this keeps both cores busy.
	pg_start
	ctest --test-dir "$dir" --output-on-failure -j "$((jobs + 1))" "${ctest_args[@]}"
	pg_stop
	took "test $dir"
}

# What a packager builds: gcc, Release (-O3, NDEBUG, no crash points), every
# target, then the unit tests (their PostgreSQL runs are the other suites').
# Run in the background beside the fuzzing, which keeps one core busy and
# leaves the other free; niced, so the fuzz targets keep theirs.
release_check() { # DIR
	local dir=$1
	clock=$SECONDS
	configure_build "$dir" gcc -DCMAKE_BUILD_TYPE=Release
	echo "==> unit tests $dir"
	ctest --test-dir "$dir" --output-on-failure -j "$jobs" -L unit -LE pg \
		"${ctest_args[@]}"
	took "unit tests $dir"
}

mkdir -p build
run_suite build/default gcc
if [ "$asan" = 1 ]; then
	# The sanitizer suite is also the clang build: clang's warnings and
	# its ASan/UBSan, where the other builds are gcc's.
	export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1
	export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
	run_suite build/asan clang -DSEMQ_SANITIZE=ON
fi
echo "==> build/release in the background (its log: build/release.log)"
release_start=$SECONDS
set -m # its own process group, which the EXIT trap can stop as a whole
(
	renice -n 10 -p "$BASHPID" >/dev/null
	release_check build/release
) </dev/null >build/release.log 2>&1 &
release_pid=$!
set +m
# Every fuzz target for a bounded time, from its corpus and past crashes
# (a long run: tools/fuzz.sh --runs 10000000). A failure (or an interrupt,
# which fuzz.sh's build or targets turn into one) ends the run at once: the
# EXIT trap stops the Release build.
tools/fuzz.sh --werror --seconds 10 ||
	{ echo "tools/test.sh: fuzzing failed; the Release build is stopped" >&2; exit 1; }
took "fuzz (build/fuzz)"
release_rc=0
wait "$release_pid" || release_rc=$?
release_pid=""
cat build/release.log
echo "==> build/release took $((SECONDS - release_start)) s in all, beside the fuzzing"
[ "$release_rc" = 0 ] ||
	{ echo "tools/test.sh: the Release build or its unit tests failed (above)" >&2; exit 1; }
echo "==> all tests passed"
