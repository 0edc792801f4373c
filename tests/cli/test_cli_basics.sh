#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# CLI basics of semqd and semqctl, with the real binaries:
#  - --version of both names the build's version (CMake's project version);
#  - per-command help: `semqctl redo --help` (the group),
#    `semqctl redo retry --help` and `semqctl help redo retry` (one command);
#  - which configuration is read: -c, else $SEMQ_CONFIG, else
#    /etc/semq/node.ini, and a missing one is exit 2 naming the path and how
#    it was chosen;
#  - semqctl does not create a database: a wrong db is exit 1 and no file
#    appears; --create creates it;
#  - semqd --check: 0 fine, 2 configuration error (FILE:LINE), 1 runtime
#    failure (a database that cannot be opened);
#  - a relative plugin path (and db) is relative to the config file's
#    directory whether -c is b1.ini, ./b1.ini or absolute;
#  - the bash completion of semqctl (tools/semqctl.bash-completion).
#
# Usage: bash test_cli_basics.sh SEMQD SEMQCTL JOURNAL_SO VERSION
set -euo pipefail

if [ $# -ne 4 ]; then
	echo "usage: $0 SEMQD SEMQCTL JOURNAL_SO VERSION" >&2
	exit 2
fi
SEMQD=$(realpath "$1")
SEMQCTL=$(realpath "$2")
JOURNAL=$(realpath "$3")
VERSION=$4
SRC=$(cd "$(dirname "$0")/../.." && pwd)

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
cli_begin test_cli_basics
CLI_BAD_SHOWS=run
CLI_BAD_LINES=20
# run PROGRAM ARGS...: sets rc, out and err (also in $dir/out, $dir/err),
# with SEMQ_CONFIG unset unless the caller exports SEMQ_CONFIG_FOR_RUN.
run() {
	if [ -n "${SEMQ_CONFIG_FOR_RUN:-}" ]; then
		capture env SEMQ_CONFIG="$SEMQ_CONFIG_FOR_RUN" "$@"
	else
		capture env -u SEMQ_CONFIG "$@"
	fi
}

# ---- --version -----------------------------------------------------------------
for p in semqd semqctl; do
	prog=$SEMQD
	[ "$p" = semqctl ] && prog=$SEMQCTL
	for opt in --version -V; do
		run "$prog" "$opt"
		if [ "$rc" -eq 0 ] && [ "$out" = "$p $VERSION" ] && [ -z "$err" ]; then
			ok "$p $opt prints '$p $VERSION', exit 0"
		else
			bad "$p $opt prints '$p $VERSION', exit 0"
		fi
	done
done

# ---- per-command help -------------------------------------------------------------
run "$SEMQCTL" redo --help
if [ "$rc" -eq 0 ] && [ -z "$err" ] &&
	[ "$(head -1 "$dir/out")" = "Usage: semqctl [-c node.ini] [--json] redo COMMAND [ARGS]" ] &&
	grep -q '^  redo list ' "$dir/out" && grep -q '^  redo retry ID' "$dir/out" &&
	grep -q '^  redo discard ID --reason TEXT' "$dir/out" &&
	! grep -q '^  status' "$dir/out"; then
	ok "redo --help lists the redo commands with their usage, not the global help"
else
	bad "redo --help lists the redo commands with their usage, not the global help"
fi
run "$SEMQCTL" help redo
cp "$dir/out" "$dir/group_help"
run "$SEMQCTL" redo --help
if [ "$rc" -eq 0 ] && cmp -s "$dir/out" "$dir/group_help"; then
	ok "help redo prints the same as redo --help"
else
	bad "help redo prints the same as redo --help"
fi
run "$SEMQCTL" redo retry --help
cp "$dir/out" "$dir/cmd_help"
if [ "$rc" -eq 0 ] && [ -z "$err" ] &&
	[ "$(head -1 "$dir/out")" = "Usage: semqctl [-c node.ini] [--json] redo retry ID | --all-dead | --where EXPR [--dest D] [--key K] [--since WHEN] [--dry-run]" ] &&
	grep -q -- '--all-dead   every dead entry' "$dir/out" &&
	grep -q -- '--create' "$dir/out" && grep -q -- 'SEMQ_CONFIG' "$dir/out"; then
	ok "redo retry --help prints its usage, options and the global options"
else
	bad "redo retry --help prints its usage, options and the global options"
fi
run "$SEMQCTL" help redo retry
if [ "$rc" -eq 0 ] && cmp -s "$dir/out" "$dir/cmd_help"; then
	ok "help redo retry prints the same as redo retry --help"
else
	bad "help redo retry prints the same as redo retry --help"
fi
run "$SEMQCTL" help
if [ "$rc" -eq 0 ] && [[ "$out" == "Usage: semqctl [-c node.ini]"* ]] &&
	[[ "$out" == *"help [COMMAND]"* ]] && [[ "$out" == *"--version"* ]]; then
	ok "help alone prints the global help"
else
	bad "help alone prints the global help"
fi
run "$SEMQCTL" help frobnicate
if [ "$rc" -eq 2 ] && [[ "$err" == *"unknown command 'frobnicate'"* ]]; then
	ok "help of an unknown command is a usage error, exit 2"
else
	bad "help of an unknown command is a usage error, exit 2"
fi

# ---- which configuration: -c, $SEMQ_CONFIG, /etc/semq/node.ini ------------------
mkdir -p "$dir/n"
cat >"$dir/n/node.ini" <<EOF
[node]
id = R1
db = node.db
EOF
# The messages name $SEMQ_CONFIG literally.
# shellcheck disable=SC2016
default_missing='configuration file /etc/semq/node.ini (the default: neither -c nor $SEMQ_CONFIG given) does not exist'
if [ -e /etc/semq/node.ini ]; then
	echo "skip - the default /etc/semq/node.ini (it exists on this machine)"
else
	for args in "status" "--create status" "send --to S1 --type 1 --data x"; do
		# shellcheck disable=SC2086
		run "$SEMQCTL" $args
		if [ "$rc" -eq 2 ] && [ -z "$out" ] &&
			[ "$err" = "semqctl: $default_missing" ]; then
			ok "semqctl $args without -c or \$SEMQ_CONFIG names /etc/semq/node.ini, exit 2"
		else
			bad "semqctl $args without -c or \$SEMQ_CONFIG names /etc/semq/node.ini, exit 2"
		fi
	done
	run "$SEMQD" --check
	if [ "$rc" -eq 2 ] &&
		[ "$err" = "semqd: $default_missing" ]; then
		ok "semqd without -c or \$SEMQ_CONFIG names /etc/semq/node.ini, exit 2"
	else
		bad "semqd without -c or \$SEMQ_CONFIG names /etc/semq/node.ini, exit 2"
	fi
fi
SEMQ_CONFIG_FOR_RUN=$dir/n/missing.ini run "$SEMQCTL" status
if [ "$rc" -eq 2 ] &&
	[ "$err" = "semqctl: configuration file $dir/n/missing.ini (\$SEMQ_CONFIG) does not exist" ]; then
	ok "a missing \$SEMQ_CONFIG file is exit 2 naming it and \$SEMQ_CONFIG"
else
	bad "a missing \$SEMQ_CONFIG file is exit 2 naming it and \$SEMQ_CONFIG"
fi
run "$SEMQCTL" -c "$dir/wrong/path.ini" status
if [ "$rc" -eq 2 ] &&
	[ "$err" = "semqctl: configuration file $dir/wrong/path.ini (-c) does not exist" ] &&
	[ ! -e "$dir/wrong" ]; then
	ok "a wrong -c path is exit 2 naming it, nothing created"
else
	bad "a wrong -c path is exit 2 naming it, nothing created"
fi
SEMQ_CONFIG_FOR_RUN=$dir/n/node.ini run "$SEMQCTL" --create status --json
if [ "$rc" -eq 0 ] && [ -s "$dir/n/node.db" ] &&
	pyjson 'assert d["node"] == "R1", d'; then
	ok "\$SEMQ_CONFIG is read when -c is not given"
else
	bad "\$SEMQ_CONFIG is read when -c is not given"
fi
cat >"$dir/n/other.ini" <<EOF
[node]
id = R2
db = other.db
EOF
SEMQ_CONFIG_FOR_RUN=$dir/n/node.ini run "$SEMQCTL" -c "$dir/n/other.ini" --create status --json
if [ "$rc" -eq 0 ] &&
	pyjson 'assert d["node"] == "R2", d'; then
	ok "-c wins over \$SEMQ_CONFIG"
else
	bad "-c wins over \$SEMQ_CONFIG"
fi

# ---- semqctl does not create a database -------------------------------------
cat >"$dir/n/typo.ini" <<EOF
[node]
id = R1
db = nodee.db
EOF
for args in "status" "outbound list" "redo list" "received list" "lives" \
	"send --to S1 --type 1 --data x"; do
	# shellcheck disable=SC2086
	run "$SEMQCTL" -c "$dir/n/typo.ini" $args
	if [ "$rc" -eq 1 ] && [ -z "$out" ] &&
		[ "$err" = "semqctl: database $dir/n/nodee.db does not exist (the node creates it on first start; semqctl --create to create it now)" ] &&
		[ ! -e "$dir/n/nodee.db" ] && [ ! -e "$dir/n/nodee.db-wal" ]; then
		ok "$args on a db that does not exist: exit 1, says so, creates nothing"
	else
		bad "$args on a db that does not exist: exit 1, says so, creates nothing"
	fi
done
: >"$dir/n/empty.db"
sed 's/^db = .*/db = empty.db/' "$dir/n/typo.ini" >"$dir/n/empty.ini"
run "$SEMQCTL" -c "$dir/n/empty.ini" status
if [ "$rc" -eq 1 ] &&
	[ "$err" = "semqctl: database $dir/n/empty.db has no SEMQ schema (the node creates it on first start; semqctl --create to create it now)" ] &&
	[ "$(sqlite3 "$dir/n/empty.db" "SELECT count(*) FROM sqlite_master")" = 0 ]; then
	ok "a database file without the schema is refused too, left without tables"
else
	bad "a database file without the schema is refused too, left without tables"
fi
run "$SEMQCTL" -c "$dir/n/typo.ini" send --to S1 --type 1 --data x --create
if [ "$rc" -eq 0 ] && [ "$out" = "queued R1/S1/1" ] &&
	[ "$(sqlite3 "$dir/n/nodee.db" "SELECT count(*) FROM tb_0031")" = 1 ]; then
	ok "--create (after the command too) creates the database and queues"
else
	bad "--create (after the command too) creates the database and queues"
fi
run "$SEMQCTL" -c "$dir/n/typo.ini" status --json
if [ "$rc" -eq 0 ]; then
	ok "once it exists, semqctl opens it without --create"
else
	bad "once it exists, semqctl opens it without --create"
fi

# The same on PostgreSQL: a database without the SEMQ schema is refused and
# left without tables (with the cluster of $SEMQ_TEST_PG_URL; else skipped).
if [ -n "${SEMQ_TEST_PG_URL:-}" ] && command -v psql >/dev/null; then
	pgdb=semq_cli_basics_$$
	pgurl=$(python3 -c 'import sys, urllib.parse as u
p = u.urlparse(sys.argv[1]); print(p._replace(path="/" + sys.argv[2]).geturl())' \
		"$SEMQ_TEST_PG_URL" "$pgdb")
	psql "$SEMQ_TEST_PG_URL" -qc "CREATE DATABASE $pgdb" >/dev/null
	printf '[node]\nid = R1\ndb = %s\n' "$pgurl" >"$dir/n/pg.ini"
	run "$SEMQCTL" -c "$dir/n/pg.ini" status
	tables=$(psql "$pgurl" -Atc "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()")
	if [ "$rc" -eq 1 ] && [[ "$err" == "semqctl: database postgresql://"*"/$pgdb"*" has no SEMQ schema (the node creates it on first start; semqctl --create to create it now)" ]] &&
		[ "$tables" = 0 ]; then
		ok "PostgreSQL: a database without the schema is refused, exit 1, no table made"
	else
		bad "PostgreSQL: a database without the schema is refused, exit 1, no table made"
	fi
	run "$SEMQCTL" -c "$dir/n/pg.ini" --create status --json
	if [ "$rc" -eq 0 ] && [ "$(psql "$pgurl" -Atc "SELECT to_regclass('tb_0031') IS NOT NULL")" = t ]; then
		ok "PostgreSQL: --create makes the schema"
	else
		bad "PostgreSQL: --create makes the schema"
	fi
	psql "$SEMQ_TEST_PG_URL" -qc "DROP DATABASE $pgdb WITH (FORCE)" >/dev/null || true
else
	echo "skip - PostgreSQL without the schema (SEMQ_TEST_PG_URL is not set)"
fi

# ---- semqd --check exit codes -------------------------------------------------
mkdir -p "$dir/c"
cp "$JOURNAL" "$dir/c/inbox.so"
cat >"$dir/c/b1.ini" <<EOF
[node]
id = S1
db = b1.db

[plugin journal]
path = inbox.so
types = *
EOF
(cd "$dir/c" && "$SEMQD" -c b1.ini --check >"$dir/out" 2>"$dir/err") && rc=0 || rc=$?
out=$(cat "$dir/out")
if [ "$rc" -eq 0 ] && [ "$out" = "b1.ini: configuration, certificates, database and plugins are fine" ]; then
	ok "--check on a good file: exit 0, says so"
else
	bad "--check on a good file: exit 0, says so"
fi
sed 's/^id = S1$/id = S1\nlissen = 127.0.0.1:7000/' "$dir/c/b1.ini" >"$dir/c/bad.ini"
run "$SEMQD" -c "$dir/c/bad.ini" --check
if [ "$rc" -eq 2 ] && [[ "$err" == "$dir/c/bad.ini:3: "*lissen* ]]; then
	ok "--check on a configuration error: exit 2, FILE:LINE: message"
else
	bad "--check on a configuration error: exit 2, FILE:LINE: message"
fi
echo "not a database, just text long enough to be taken for a header" >"$dir/c/garbage.db"
sed 's/^db = b1.db$/db = garbage.db/' "$dir/c/b1.ini" >"$dir/c/garbage.ini"
run "$SEMQD" -c "$dir/c/garbage.ini" --check
if [ "$rc" -eq 1 ] && [[ "$err" == *"garbage.db: not a SEMQ database"* ]]; then
	ok "--check when the database cannot be opened: exit 1 (runtime failure)"
else
	bad "--check when the database cannot be opened: exit 1 (runtime failure)"
fi
run "$SEMQD" -c "$dir/c/b1.ini" --bogus
if [ "$rc" -eq 2 ] && [[ "$err" == *"unknown option '--bogus'"* ]]; then
	ok "semqd: an unknown option is exit 2"
else
	bad "semqd: an unknown option is exit 2"
fi

# ---- relative paths: the same whatever -c looks like -----------------------------
# path = inbox.so is a file beside b1.ini; dlopen() would look a bare name up
# in the library path.
rm -f "$dir/c/b1.db"*
for form in "b1.ini" "./b1.ini" "$dir/c/b1.ini"; do
	(cd "$dir/c" && "$SEMQD" -c "$form" --check >"$dir/out" 2>"$dir/err") && rc=0 || rc=$?
	if [ "$rc" -eq 0 ] && [ -s "$dir/c/b1.db" ]; then
		ok "-c $form: the plugin path inbox.so and db b1.db are beside the file"
	else
		bad "-c $form: the plugin path inbox.so and db b1.db are beside the file"
	fi
done
(cd "$dir" && "$SEMQD" -c c/b1.ini --check >"$dir/out" 2>"$dir/err") && rc=0 || rc=$?
if [ "$rc" -eq 0 ] && [ ! -e "$dir/b1.db" ]; then
	ok "-c c/b1.ini from the parent: still beside the file"
else
	bad "-c c/b1.ini from the parent: still beside the file"
fi
(cd "$dir/c" && env -u SEMQ_CONFIG "$SEMQCTL" -c b1.ini status >"$dir/out" 2>"$dir/err") && rc=0 || rc=$?
if [ "$rc" -eq 0 ] && grep -q "db ./b1.db" "$dir/out"; then
	ok "semqctl -c b1.ini opens ./b1.db, the database semqd made"
else
	bad "semqctl -c b1.ini opens ./b1.db, the database semqd made"
fi

# ---- bash completion ---------------------------------------------------------------
# comp WORDS...: what completing the last word offers, one line, sorted; in a
# bash that has sourced the completion, with this semqctl first in PATH.
cat >"$dir/comp.sh" <<'EOF'
source "$1"
shift
complete -p semqctl
COMP_WORDS=("$@")
COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
_semqctl
printf '%s\n' "${COMPREPLY[@]}" | sort | tr '\n' ' '
EOF
comp() {
	(cd "$dir/n" && PATH="$(dirname "$SEMQCTL"):$PATH" bash "$dir/comp.sh" \
		"$SRC/tools/semqctl.bash-completion" "$@" >"$dir/out" 2>"$dir/err") && rc=0 || rc=$?
	out=$(sed -n 2p "$dir/out")
}
comp semqctl ""
if [ "$rc" -eq 0 ] && [ "$(sed -n 1p "$dir/out")" = "complete -F _semqctl semqctl" ] &&
	[ "$out" = "help lives outbound peers received redo send status trace " ]; then
	ok "completion: complete -p semqctl names _semqctl; the commands"
else
	bad "completion: complete -p semqctl names _semqctl; the commands"
fi
# want NAME EXPECTED WORDS...
want() {
	local name=$1 expected=$2
	shift 2
	comp "$@"
	if [ "$rc" -eq 0 ] && [ "$out" = "$expected" ]; then
		ok "completion: $name"
	else
		bad "completion: $name (want '$expected', got '$out')"
	fi
}
want "re -> received redo" "received redo " semqctl re
want "redo -> its subcommands" "discard list retry show " semqctl redo ""
want "after -c FILE and --json too" "retry " semqctl -c x.ini --json redo r
want "the options of redo retry" "--all-dead " semqctl redo retry --a
want "the options of send" "--data --delay --deliver-at " semqctl send --to S1 --d
want "the values of outbound list --status" \
	"cancelled confirmed held relay-acked sent unsent " semqctl outbound list --status ""
want "-c completes file names" "typo.ini " semqctl -c typ
want "global options" "--config --create " semqctl --c
want "help redo -> its subcommands" "discard list retry show " semqctl help redo ""

cli_end
