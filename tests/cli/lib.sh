# SPDX-License-Identifier: MIT
# shellcheck shell=bash
#
# What the CLI tests of tests/cli share, sourced by each after its own
# arguments are checked:
#
#   . "$(dirname "$0")/lib.sh"
#   cli_begin test_NAME          # $dir, the counters, the EXIT trap
#   ...ok/bad/check/run...
#   cli_end                      # "N passed, M failed"; exit 1 on a failure
#
# The shape every test has: a scratch directory $dir removed on exit; the
# processes in $pids (a test's semqd nodes) sent SIGTERM and waited for on
# exit; `ok NAME` and `bad NAME` counting and printing one line per check;
# and an exit that is not cli_end's (set -e stopped the script outside a
# check) said as an abort, so that it is not mistaken for a short run.
#
# Each test keeps its own run() (what it runs, with which environment and
# stdin) on top of capture(), and its own checks.

# cli_begin NAME: makes $dir (under $TMPDIR), zeroes pass, fail and
# finished, empties pids and installs the EXIT trap.
cli_begin() {
	dir=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
	pass=0
	fail=0
	finished=0
	pids=()
	trap cli_on_exit EXIT
}

# On exit: stop the test's processes, remove the directory; if a command
# outside a check failed (set -e), say so.
cli_on_exit() {
	local rc=$? p
	for p in "${pids[@]}"; do
		kill -TERM "$p" 2>/dev/null || true
	done
	for p in "${pids[@]}"; do
		wait "$p" 2>/dev/null || true
	done
	rm -rf "$dir"
	if [ "$finished" -eq 0 ]; then
		echo "aborted (exit $rc) after $pass passed, $fail failed"
		exit 1
	fi
}

# cli_end: the summary line; exit status 1 when a check failed.
cli_end() {
	finished=1
	echo "$pass passed, $fail failed"
	[ "$fail" -eq 0 ]
}

ok() {
	pass=$((pass + 1))
	echo "ok   - $1"
}

# bad NAME: counts a failure and shows why under its line. With
# CLI_BAD_SHOWS=run (tests whose checks look at run's results): rc and the
# command's stdout and stderr ($dir/out, $dir/err), the first
# $CLI_BAD_LINES lines of each (all when unset). Otherwise: the last 20
# lines of $dir/log (check's output), when it has any.
bad() {
	fail=$((fail + 1))
	echo "FAIL - $1"
	if [ "${CLI_BAD_SHOWS:-log}" = run ]; then
		echo "       rc=$rc"
		sed 's/^/       stdout: /' "$dir/out" | cli_first_lines
		sed 's/^/       stderr: /' "$dir/err" | cli_first_lines
	else
		[ -s "$dir/log" ] && sed 's/^/       /' "$dir/log" | tail -20
	fi
	return 0
}
cli_first_lines() {
	if [ -n "${CLI_BAD_LINES:-}" ]; then head -"$CLI_BAD_LINES"; else cat; fi
}

# check NAME COMMAND...: runs the command with its output in $dir/log; ok
# when it exits 0.
check() {
	local name=$1
	shift
	if "$@" >"$dir/log" 2>&1; then ok "$name"; else bad "$name"; fi
}

# capture COMMAND...: runs it (stdin as the caller's); sets rc, and leaves
# stdout/stderr in $dir/out and $dir/err (and in $out, $err).
# shellcheck disable=SC2034 # rc, out and err are the caller's
capture() {
	rc=0
	"$@" >"$dir/out" 2>"$dir/err" || rc=$?
	out=$(cat "$dir/out")
	err=$(cat "$dir/err")
}

# pyjson EXPR: evaluates python assertions on `d`, the JSON in $dir/out;
# python's complaint goes to $dir/err, which bad shows.
pyjson() {
	python3 -c "import json,sys
d = json.load(open(sys.argv[1]))
$1" "$dir/out" 2>>"$dir/err"
}
