#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# CLI test of semqctl: status on a fresh and on a filled database, send with
# each payload source, --json output, and the exit codes of SPEC §8 (0 ok,
# 1 runtime failure, 2 usage or configuration error, each with a message that
# names the culprit).
#
# Usage: bash test_semqctl.sh PATH/TO/semqctl PATH/TO/journal.so
set -euo pipefail

if [ $# -ne 2 ]; then
	echo "usage: $0 SEMQCTL JOURNAL_SO" >&2
	exit 2
fi
# Absolute: node.ini paths are relative to the file, and the test cds nowhere.
SEMQCTL=$(realpath "$1")
JOURNAL=$(realpath "$2")

dir=$(mktemp -d "${TMPDIR:-/tmp}/test_semqctl.XXXXXX")
pass=0
fail=0
finished=0
# On exit: remove the directory; if a command outside a check failed (set -e),
# say so, so that an abort is not mistaken for a short run.
on_exit() {
	local rc=$?
	rm -rf "$dir"
	if [ "$finished" -eq 0 ]; then
		echo "aborted (exit $rc) after $pass passed, $fail failed"
		exit 1
	fi
}
trap on_exit EXIT
ok() {
	pass=$((pass + 1))
	echo "ok   - $1"
}
bad() {
	fail=$((fail + 1))
	echo "FAIL - $1"
	echo "       rc=$rc"
	sed 's/^/       stdout: /' "$dir/out"
	sed 's/^/       stderr: /' "$dir/err"
}

# run ARGS...: runs semqctl with stdin from $IN (default /dev/null); sets rc,
# and leaves stdout/stderr in $dir/out and $dir/err (and in $out, $err).
IN=/dev/null
run() {
	rc=0
	"$SEMQCTL" "$@" <"$IN" >"$dir/out" 2>"$dir/err" || rc=$?
	out=$(cat "$dir/out")
	err=$(cat "$dir/err")
}

# expect_usage NAME NEEDLE ARGS...: exit 2, nothing on stdout, exactly two
# lines on stderr: the first names the argument (contains NEEDLE), the
# second points at --help.
expect_usage() {
	local name=$1 needle=$2
	shift 2
	run "$@"
	local first second lines
	lines=$(wc -l <"$dir/err")
	first=$(sed -n 1p "$dir/err")
	second=$(sed -n 2p "$dir/err")
	if [ "$rc" -eq 2 ] && [ -z "$out" ] && [ "$lines" -eq 2 ] &&
		[[ "$first" == semqctl:* ]] && [[ "$first" == *"$needle"* ]] &&
		[[ "$second" =~ ^Try\ \'semqctl\ .*--help\'\.$ ]]; then
		ok "$name"
	else
		bad "$name (want exit 2 and a line naming: $needle)"
	fi
}

# pyjson EXPR: evaluates python assertions on `d`, the JSON in $dir/out.
pyjson() {
	python3 -c "import json,sys
d = json.load(open(sys.argv[1]))
$1" "$dir/out" 2>>"$dir/err"
}

# sql QUERY: runs a query on the node database.
sql() {
	sqlite3 "$dir/node.db" "$1"
}

cat >"$dir/node.ini" <<EOF
[node]
id = R1
db = node.db
max_payload = 1024

[plugin journal]
path = $JOURNAL
types = *
EOF
INI=$dir/node.ini

# ---- help ------------------------------------------------------------------
run --help
if [ "$rc" -eq 0 ] && [[ "$out" == Usage:\ semqctl* ]] &&
	[[ "$out" == *status* ]] && [[ "$out" == *send* ]] && [ -z "$err" ]; then
	ok "--help prints the usage and the commands on stdout, exit 0"
else
	bad "--help prints the usage and the commands on stdout, exit 0"
fi
run send --help
if [ "$rc" -eq 0 ] && [[ "$out" == *"--to D --type T"* ]] &&
	[[ "$out" == *"--deliver-at"* ]] && [ -z "$err" ]; then
	ok "send --help prints the usage of send without -c, exit 0"
else
	bad "send --help prints the usage of send without -c, exit 0"
fi
run -c "$INI" status --help
if [ "$rc" -eq 0 ] && [[ "$out" == *"semqctl -c node.ini [--json] status"* ]] &&
	[ ! -e "$dir/node.db" ]; then
	ok "status --help exits 0 and does not touch the database"
else
	bad "status --help exits 0 and does not touch the database"
fi

# ---- status on a new database ------------------------------------------------
run -c "$INI" status
if [ "$rc" -eq 0 ] && [[ "$out" == *"no messages"* ]] &&
	[[ "$out" == *R1* ]] && [[ "$out" == *"$dir/node.db"* ]] &&
	[ -s "$dir/node.db" ]; then
	ok "status creates the database and shows 'no messages'"
else
	bad "status creates the database and shows 'no messages'"
fi
run --config="$INI" status --json
if [ "$rc" -eq 0 ] && pyjson '
assert d["node"] == "R1", d
assert d["db"].endswith("/node.db"), d
assert isinstance(d["schema_version"], int) and d["schema_version"] >= 1, d
assert d["queues"] == [] and d["streams_in"] == [], d'; then
	ok "status --json on an empty database (--config=FILE form)"
else
	bad "status --json on an empty database (--config=FILE form)"
fi

# ---- the issue's acceptance check: a bare INSERT is a queued message ---------
sql "INSERT INTO tb_0031(dest,type,msg_key,payload) VALUES('S1',2800,'K1',x'00')"
if [ "$(sql 'SELECT origin, seq, status FROM tb_0031')" = "R1|1|0" ]; then
	ok "a bare INSERT gets origin R1, seq 1, status 0"
else
	rc=-
	bad "a bare INSERT gets origin R1, seq 1, status 0"
fi
for form in "--json status" "status --json"; do
	# shellcheck disable=SC2086
	run -c "$INI" $form
	if [ "$rc" -eq 0 ] && pyjson '
q = d["queues"]
assert len(q) == 1, q
r = q[0]
assert r["table"] == "tb_0031" and r["origin"] == "R1" and r["dest"] == "S1", r
assert r["status"] == 0 and r["status_name"] == "unsent" and r["count"] == 1, r
assert isinstance(r["oldest"], int) and r["oldest"] > 1600000000000, r'; then
		ok "'$form' shows the inserted row: tb_0031 R1 S1 0 unsent 1"
	else
		bad "'$form' shows the inserted row: tb_0031 R1 S1 0 unsent 1"
	fi
done
run -c "$INI" status
if [ "$rc" -eq 0 ] &&
	grep -Eq '^TABLE +ORIGIN +DEST +STATUS +COUNT +OLDEST$' "$dir/out" &&
	grep -Eq '^tb_0031 +R1 +S1 +0 unsent +1 +[0-9]+s$' "$dir/out" &&
	! grep -q 'no messages' "$dir/out"; then
	ok "status prints an aligned table with the row and its age"
else
	bad "status prints an aligned table with the row and its age"
fi

# ---- send: each payload source takes the next seq --------------------------
run -c "$INI" send --to S1 --type 2800 --key K1 --data hello
if [ "$rc" -eq 0 ] && [ "$out" = "queued R1/S1/2" ] &&
	[[ "$err" == *semqd* ]] &&
	[ "$(sql "SELECT type, msg_key, prev_seq, hex(payload), deliver_at FROM tb_0031 WHERE seq = 2")" = "2800|K1|1|68656C6C6F|0" ]; then
	ok "send --data queues R1/S1/2 (key chain prev_seq 1), notes no daemon"
else
	bad "send --data queues R1/S1/2 (key chain prev_seq 1), notes no daemon"
fi
printf 'a\000b\377' >"$dir/payload.bin"
run -c "$INI" send --to S1 --type 7 --file "$dir/payload.bin"
if [ "$rc" -eq 0 ] && [ "$out" = "queued R1/S1/3" ] &&
	[ "$(sql "SELECT type, msg_key IS NULL, hex(payload) FROM tb_0031 WHERE seq = 3")" = "7|1|610062FF" ]; then
	ok "send --file queues R1/S1/3 with the file's bytes"
else
	bad "send --file queues R1/S1/3 with the file's bytes"
fi
printf 'from stdin' >"$dir/stdin.txt"
IN=$dir/stdin.txt
run -c "$INI" send --to S1 --type 4294967295 -
IN=/dev/null
if [ "$rc" -eq 0 ] && [ "$out" = "queued R1/S1/4" ] &&
	[ "$(sql "SELECT type, CAST(payload AS TEXT) FROM tb_0031 WHERE seq = 4")" = "4294967295|from stdin" ]; then
	ok "send - reads stdin and queues R1/S1/4"
else
	bad "send - reads stdin and queues R1/S1/4"
fi
before=$(($(date +%s) * 1000))
run -c "$INI" send --json --to S1 --type 1 --delay 1m --data x
if [ "$rc" -eq 0 ] && [ -z "$err" ] && pyjson '
assert d == {"origin": "R1", "dest": "S1", "seq": 5, "woke_daemon": False}, d'; then
	ok "send --json prints origin, dest, seq 5, woke_daemon false"
else
	bad "send --json prints origin, dest, seq 5, woke_daemon false"
fi
at=$(sql "SELECT deliver_at FROM tb_0031 WHERE seq = 5")
if [ "$at" -ge $((before + 60000)) ] && [ "$at" -le $((before + 70000)) ]; then
	ok "--delay 1m sets deliver_at a minute ahead"
else
	rc=-
	bad "--delay 1m sets deliver_at a minute ahead (got $at)"
fi
head -c 1024 /dev/zero >"$dir/max.bin"
run -c "$INI" --json send --to S2 --type 1 --deliver-at 1234 --file "$dir/max.bin"
if [ "$rc" -eq 0 ] && pyjson 'assert d["dest"] == "S2" and d["seq"] == 1, d' &&
	[ "$(sql "SELECT deliver_at, length(payload) FROM tb_0031 WHERE dest = 'S2'")" = "1234|1024" ]; then
	ok "a payload of exactly max_payload is accepted; --deliver-at stored"
else
	bad "a payload of exactly max_payload is accepted; --deliver-at stored"
fi
run -c "$INI" --json status
if [ "$rc" -eq 0 ] && pyjson '
c = {(r["table"], r["dest"], r["status"]): r["count"] for r in d["queues"]}
assert c == {("tb_0031", "S1", 0): 5, ("tb_0031", "S2", 0): 1}, c'; then
	ok "status counts every queued message per stream"
else
	bad "status counts every queued message per stream"
fi

# A stand-in for semqd's wake socket: binds the abstract unix name that
# semq_wake_name() derives from the database's canonical path (FNV-1a 64, see
# lib/semq.c), and prints what it receives.
python3 -c '
import os, socket, sys
h = 1469598103934665603
for b in os.path.realpath(sys.argv[1]).encode():
    h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(b"\0semq-wake-%016x" % h)
open(sys.argv[2], "w").close()
s.settimeout(20)
print(s.recv(16).decode())
' "$dir/node.db" "$dir/ready" >"$dir/woken" &
waker=$!
for _ in $(seq 100); do
	[ -e "$dir/ready" ] && break
	sleep 0.1
done
run -c "$INI" send --to S1 --type 1 --data wake --json
wait "$waker" || true
if [ "$rc" -eq 0 ] && [ -z "$err" ] && [ "$(cat "$dir/woken")" = w ] &&
	pyjson 'assert d["seq"] == 6 and d["woke_daemon"] is True, d'; then
	ok "send wakes a listening daemon: woke_daemon true"
else
	bad "send wakes a listening daemon: woke_daemon true"
fi
run -c "$INI" status --json
if [ "$rc" -eq 0 ] && pyjson '
c = {(r["table"], r["dest"], r["status"]): r["count"] for r in d["queues"]}
assert c == {("tb_0031", "S1", 0): 6, ("tb_0031", "S2", 0): 1}, c'; then
	ok "status counts the woken send too"
else
	bad "status counts the woken send too"
fi

# ---- usage errors: exit 2, one line naming the argument --------------------
count_before=$(sql "SELECT count(*) FROM tb_0031")
head -c 2000 /dev/zero >"$dir/big.bin"
key256=$(printf 'k%.0s' $(seq 256))
data1025=$(printf 'd%.0s' $(seq 1025))

expect_usage "missing -c" "-c node.ini is required" status
expect_usage "missing -c for send" "-c node.ini is required" \
	send --to S1 --type 1 --data x
expect_usage "-c without a value" "-c needs a value" status -c
expect_usage "no command" "no command" -c "$INI"
expect_usage "unknown command" "unknown command 'frobnicate'" \
	-c "$INI" frobnicate
expect_usage "unknown option before the command" "unknown option '--bogus'" \
	-c "$INI" --bogus status
expect_usage "unknown option of status" "status: unknown option '--bogus'" \
	-c "$INI" status --bogus
expect_usage "status takes no argument" "unexpected argument 'extra'" \
	-c "$INI" status extra
expect_usage "--type abc" "send: --type 'abc' is not a number 0..4294967295" \
	-c "$INI" send --to S1 --type abc --data x
expect_usage "--type over uint32" "--type '4294967296' is not a number" \
	-c "$INI" send --to S1 --type 4294967296 --data x
expect_usage "--type negative" "--type '-1' is not a number" \
	-c "$INI" send --to S1 --type -1 --data x
expect_usage "--to 'bad id'" "--to 'bad id' is not a node id" \
	-c "$INI" send --to 'bad id' --type 1 --data x
expect_usage "--to missing" "--to D is required" \
	-c "$INI" send --type 1 --data x
expect_usage "--to given twice" "--to is given twice" \
	-c "$INI" send --to S1 --to S2 --type 1 --data x
expect_usage "--type without a value" "--type needs a value" \
	-c "$INI" send --to S1 --data x --type
expect_usage "--data and --file" "--data and --file are given" \
	-c "$INI" send --to S1 --type 1 --data x --file "$dir/payload.bin"
expect_usage "--data and -" "--data and - (stdin) are given" \
	-c "$INI" send --to S1 --type 1 --data x -
expect_usage "no payload source" "no payload" \
	-c "$INI" send --to S1 --type 1
expect_usage "--key of 256 bytes" "--key is 256 bytes long, at most 255" \
	-c "$INI" send --to S1 --type 1 --key "$key256" --data x
expect_usage "--delay not a duration" "--delay 'soon' is not a duration" \
	-c "$INI" send --to S1 --type 1 --delay soon --data x
expect_usage "--delay and --deliver-at" "--delay and --deliver-at" \
	-c "$INI" send --to S1 --type 1 --delay 5s --deliver-at 1 --data x
expect_usage "--deliver-at not a number" "--deliver-at 'tomorrow'" \
	-c "$INI" send --to S1 --type 1 --deliver-at tomorrow --data x
expect_usage "--data over max_payload" \
	"--data is 1025 bytes, larger than max_payload 1024" \
	-c "$INI" send --to S1 --type 1 --data "$data1025"
expect_usage "--file over max_payload" "larger than max_payload 1024" \
	-c "$INI" send --to S1 --type 1 --file "$dir/big.bin"
IN=$dir/big.bin
expect_usage "stdin over max_payload" "- (stdin) is larger than max_payload" \
	-c "$INI" send --to S1 --type 1 -
IN=/dev/null
expect_usage "--file that does not exist" "--file '$dir/nope'" \
	-c "$INI" send --to S1 --type 1 --file "$dir/nope"
if [ "$(sql "SELECT count(*) FROM tb_0031")" = "$count_before" ]; then
	ok "no usage error queued anything"
else
	rc=-
	bad "no usage error queued anything"
fi

# ---- configuration errors: exit 2, every line with FILE:LINE ---------------
cat >"$dir/bad.ini" <<EOF
[node]
id = R1
lissen = 127.0.0.1:7000
db = node.db
EOF
run -c "$dir/bad.ini" status
if [ "$rc" -eq 2 ] && [ -z "$out" ] && [[ "$err" == *bad.ini:3:* ]] &&
	[[ "$err" == *lissen* ]]; then
	ok "an unknown key is a configuration error naming bad.ini:3, exit 2"
else
	bad "an unknown key is a configuration error naming bad.ini:3, exit 2"
fi
run -c "$dir/missing.ini" status
if [ "$rc" -eq 2 ] && [[ "$err" == *missing.ini* ]]; then
	ok "a missing config file is exit 2 naming the file"
else
	bad "a missing config file is exit 2 naming the file"
fi

# ---- runtime failures: exit 1, one line --------------------------------------
echo "this is not a database, just text that is long enough to be a header" \
	>"$dir/garbage.db"
sed 's/^db = node.db$/db = garbage.db/' "$INI" >"$dir/garbage.ini"
run -c "$dir/garbage.ini" status
if [ "$rc" -eq 1 ] && [ -z "$out" ] && [ "$(wc -l <"$dir/err")" -eq 1 ] &&
	[[ "$err" == semqctl:*garbage.db* ]]; then
	ok "a database that cannot be opened is exit 1 with one line"
else
	bad "a database that cannot be opened is exit 1 with one line"
fi
run -c "$dir/garbage.ini" send --to S1 --type 1 --data x
if [ "$rc" -eq 1 ] && [ "$(wc -l <"$dir/err")" -eq 1 ]; then
	ok "send to a database that cannot be opened is exit 1"
else
	bad "send to a database that cannot be opened is exit 1"
fi
sed 's/^id = R1$/id = R2/' "$INI" >"$dir/other.ini"
run -c "$dir/other.ini" status
if [ "$rc" -eq 1 ] && [ "$(wc -l <"$dir/err")" -eq 1 ] &&
	[ "$(sql "SELECT count(*) FROM tb_0031")" = "$count_before" ]; then
	ok "a database of another node id is refused, exit 1"
else
	bad "a database of another node id is refused, exit 1"
fi

finished=1
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
