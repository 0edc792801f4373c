#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs every test of SEMQ on a fresh Debian 12 machine: installs what is
# missing, checks formatting, builds with -Wall -Wextra -Werror and runs the
# suite with ctest; then builds again with AddressSanitizer and
# UndefinedBehaviorSanitizer and runs the suite once more. Each suite gets a
# throw-away PostgreSQL cluster (tools/pgcluster.sh) for the PostgreSQL tests,
# named to them in SEMQ_TEST_PG_URL and removed at exit, also on failure; a
# cluster that cannot start fails the run with a banner saying why.
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
	-h | --help) sed -n '3,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "tools/test.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
	esac
	shift
done

. tools/deps.sh
semq_install_deps
semq_install_promtool

tools/check-format.sh

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
trap pg_stop EXIT
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
	pg_start
	ctest --test-dir "$dir" --output-on-failure -j "$((jobs + 1))" "${ctest_args[@]}"
	pg_stop
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
