#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# CLI test of semqctl: status on a fresh and on a filled database, send with
# each payload source, outbound list/show/cancel over rows in every status,
# --json output, and the exit codes of SPEC §8 (0 ok, 1 runtime failure,
# 2 usage or configuration error, each with a message that names the
# culprit).
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

# ---- outbound list, show, cancel ---------------------------------------------
# The rows so far, all status 0: R1/S1/1..6 (row ids 1-5 and 7), R1/S2/1 (row
# id 6). Give them the states the listings must show.
longerr="connection refused by S1 at 127.0.0.1:7103 while sending a batch"
sql "UPDATE tb_0031 SET status = 4, attempts = 2, sent_at = 1700000000000,
	last_error = '$longerr' WHERE dest = 'S1' AND seq = 2"
sql "UPDATE tb_0031 SET status = 100, result = 0, attempts = 1,
	acked_at = 1700000000500 WHERE dest = 'S1' AND seq = 3"
sql "UPDATE tb_0031 SET status = 6, attempts = 1 WHERE dest = 'S1' AND seq = 4"

# expect_usage_of CMD NAME NEEDLE ARGS...: expect_usage, and the second line
# points at the help of CMD exactly.
expect_usage_of() {
	local cmd=$1
	shift
	expect_usage "$@"
	if [ "$(sed -n 2p "$dir/err")" != "Try 'semqctl $cmd --help'." ]; then
		bad "$2: the hint names 'semqctl $cmd --help'"
	fi
}

run --help
if [ "$rc" -eq 0 ] && [[ "$out" == *"outbound list"* ]] &&
	[[ "$out" == *"outbound show"* ]] && [[ "$out" == *"outbound cancel"* ]]; then
	ok "--help lists outbound list, show and cancel"
else
	bad "--help lists outbound list, show and cancel"
fi
run outbound --help
if [ "$rc" -eq 0 ] && [ -z "$err" ] && [[ "$out" == Usage:\ semqctl* ]] &&
	[[ "$out" == *"outbound cancel"* ]]; then
	ok "outbound --help prints the main help with the outbound commands"
else
	bad "outbound --help prints the main help with the outbound commands"
fi
for sub in list show cancel; do
	run outbound "$sub" --help
	if [ "$rc" -eq 0 ] && [ -z "$err" ] &&
		[[ "$(head -1 "$dir/out")" == "Usage: semqctl -c node.ini [--json] outbound $sub"* ]]; then
		ok "outbound $sub --help prints its usage, exit 0"
	else
		bad "outbound $sub --help prints its usage, exit 0"
	fi
done
run -c "$INI" outbound cancel --help R1/S1/1
if [ "$rc" -eq 0 ] && [ "$(sql "SELECT status FROM tb_0031 WHERE dest = 'S1' AND seq = 1")" = 0 ]; then
	ok "outbound cancel --help cancels nothing"
else
	bad "outbound cancel --help cancels nothing"
fi

# -- list --
run -c "$INI" outbound list
ids=$(awk 'NR > 1 { print $1 }' "$dir/out" | tr '\n' ' ')
if [ "$rc" -eq 0 ] && [ -z "$err" ] &&
	grep -Eq '^ID +TYPE +KEY +STATUS +RESULT +ATTEMPTS +AGE +LAST_ERROR$' "$dir/out" &&
	[ "$ids" = "R1/S1/6 R1/S2/1 R1/S1/5 R1/S1/4 R1/S1/3 R1/S1/2 R1/S1/1 " ] &&
	grep -Eq '^R1/S1/3 +7 +- +100 confirmed +processed +1 +[0-9]+s +-$' "$dir/out" &&
	grep -Eq '^R1/S1/4 +4294967295 +- +6 relay-acked +- +1 +[0-9]+s +-$' "$dir/out" &&
	grep -Eq '^R1/S1/1 +2800 +K1 +0 unsent +- +0 +[0-9]+s +-$' "$dir/out"; then
	ok "outbound list: aligned table of every row, newest first"
else
	bad "outbound list: aligned table of every row, newest first"
fi
short=$(grep '^R1/S1/2 ' "$dir/out" | sed -E 's/.* [0-9]+s +//')
if [ "$short" = "${longerr:0:40}…" ] &&
	grep -Eq '^R1/S1/2 +2800 +K1 +4 sent +- +2 +[0-9]+s ' "$dir/out"; then
	ok "outbound list shortens LAST_ERROR to 40 characters and …"
else
	rc=-
	bad "outbound list shortens LAST_ERROR to 40 characters and … (got '$short')"
fi
run -c "$INI" --json outbound list
if [ "$rc" -eq 0 ] && pyjson '
assert isinstance(d, list) and len(d) == 7, d
assert [x["id"] for x in d] == ["R1/S1/6", "R1/S2/1", "R1/S1/5", "R1/S1/4",
    "R1/S1/3", "R1/S1/2", "R1/S1/1"], d
cols = {"id", "origin", "dest", "seq", "rowid", "type", "key", "prev_seq",
    "deliver_at", "created_at", "status", "status_name", "result",
    "result_name", "attempts", "next_attempt_at", "sent_at", "acked_at",
    "last_error", "payload_len"}
assert all(set(x) == cols for x in d), [set(x) ^ cols for x in d]
r = {x["id"]: x for x in d}
x = r["R1/S1/2"]
assert (x["origin"], x["dest"], x["seq"], x["type"], x["key"], x["prev_seq"],
    x["status"], x["status_name"], x["result"], x["result_name"],
    x["attempts"], x["sent_at"], x["payload_len"]) == ("R1", "S1", 2, 2800,
    "K1", 1, 4, "sent", None, None, 2, 1700000000000, 5), x
assert x["last_error"].startswith("connection refused by S1"), x
x = r["R1/S1/3"]
assert (x["status"], x["result"], x["result_name"], x["acked_at"],
    x["key"]) == (100, 0, "processed", 1700000000500, None), x
assert r["R1/S2/1"]["payload_len"] == 1024 and r["R1/S2/1"]["deliver_at"] == 1234
assert all(x["created_at"] > 1600000000000 for x in d), d'; then
	ok "outbound list --json: an array of objects with every column"
else
	bad "outbound list --json: an array of objects with every column"
fi
for st in confirmed 100; do
	run -c "$INI" outbound list --json --status "$st"
	if [ "$rc" -eq 0 ] && pyjson 'assert [x["id"] for x in d] == ["R1/S1/3"], d'; then
		ok "outbound list --status $st shows only R1/S1/3"
	else
		bad "outbound list --status $st shows only R1/S1/3"
	fi
done
run -c "$INI" outbound list --status relay-acked
if [ "$rc" -eq 0 ] && [ "$(awk 'NR > 1 { print $1 }' "$dir/out")" = R1/S1/4 ]; then
	ok "outbound list --status relay-acked shows only R1/S1/4"
else
	bad "outbound list --status relay-acked shows only R1/S1/4"
fi
run -c "$INI" outbound list --status -2
if [ "$rc" -eq 0 ] && [ "$out" = "no outbound messages" ]; then
	ok "outbound list --status -2 with none: 'no outbound messages'"
else
	bad "outbound list --status -2 with none: 'no outbound messages'"
fi
run -c "$INI" outbound list --status cancelled --json
if [ "$rc" -eq 0 ] && pyjson 'assert d == [], d'; then
	ok "outbound list --json with no rows is []"
else
	bad "outbound list --json with no rows is []"
fi
run -c "$INI" outbound list --dest S2 --limit 1 --json
if [ "$rc" -eq 0 ] && pyjson 'assert [x["id"] for x in d] == ["R1/S2/1"], d'; then
	ok "outbound list --dest S2 --limit 1 finds S2's row behind newer ones"
else
	bad "outbound list --dest S2 --limit 1 finds S2's row behind newer ones"
fi
run -c "$INI" outbound list --dest S1 --limit 2 --status unsent --json
if [ "$rc" -eq 0 ] && pyjson 'assert [x["id"] for x in d] == ["R1/S1/6", "R1/S1/5"], d'; then
	ok "outbound list --dest S1 --limit 2 --status unsent: the newest two"
else
	bad "outbound list --dest S1 --limit 2 --status unsent: the newest two"
fi
run -c "$INI" outbound list --limit 3
if [ "$rc" -eq 0 ] && [ "$(wc -l <"$dir/out")" -eq 4 ]; then
	ok "outbound list --limit 3 prints three rows"
else
	bad "outbound list --limit 3 prints three rows"
fi
run -c "$INI" outbound list --dest S9
if [ "$rc" -eq 0 ] && [ "$out" = "no outbound messages" ]; then
	ok "outbound list --dest with no rows: 'no outbound messages'"
else
	bad "outbound list --dest with no rows: 'no outbound messages'"
fi
L="outbound list"
expect_usage_of "$L" "list --status bogus" \
	"outbound list: --status 'bogus' is not unsent, sent, relay-acked" \
	-c "$INI" outbound list --status bogus
expect_usage_of "$L" "list --status 5" "--status '5' is not" \
	-c "$INI" outbound list --status 5
expect_usage_of "$L" "list --limit 0" "--limit '0' is not a number 1..100000" \
	-c "$INI" outbound list --limit 0
expect_usage_of "$L" "list --limit 100001" "--limit '100001' is not a number" \
	-c "$INI" outbound list --limit 100001
expect_usage_of "$L" "list --limit x" "--limit 'x' is not a number" \
	-c "$INI" outbound list --limit x
expect_usage_of "$L" "list --dest 'bad id'" "--dest 'bad id' is not a node id" \
	-c "$INI" outbound list --dest 'bad id'
expect_usage_of "$L" "list takes no argument" "unexpected argument 'R1/S1/1'" \
	-c "$INI" outbound list R1/S1/1
expect_usage_of "$L" "list --limit without a value" "--limit needs a value" \
	-c "$INI" outbound list --limit
expect_usage "outbound without a subcommand" \
	"'outbound' needs one of: list, show, cancel" -c "$INI" outbound
expect_usage "outbound with an unknown subcommand" \
	"'outbound' needs one of: list, show, cancel" -c "$INI" outbound frob

# -- show --
run -c "$INI" outbound show R1/S1/2
if [ "$rc" -eq 0 ] && [ -z "$err" ] &&
	grep -qx 'id               R1/S1/2' "$dir/out" &&
	grep -qx 'type             2800' "$dir/out" &&
	grep -qx 'key              K1' "$dir/out" &&
	grep -qx 'prev_seq         1' "$dir/out" &&
	grep -qx 'status           4 sent' "$dir/out" &&
	grep -qx 'result           -' "$dir/out" &&
	grep -qx 'attempts         2' "$dir/out" &&
	grep -qx 'sent_at          1700000000000 (2023-11-14T22:13:20.000Z)' "$dir/out" &&
	grep -qx 'acked_at         -' "$dir/out" &&
	grep -qx "last_error       $longerr" "$dir/out" &&
	grep -Eqx 'created_at       [0-9]{13} \([0-9-]{10}T[0-9:.]{12}Z\)' "$dir/out" &&
	[ "$(tail -2 "$dir/out")" = "payload          5 bytes, text:
hello" ]; then
	ok "outbound show: every column and the text payload"
else
	bad "outbound show: every column and the text payload"
fi
cp "$dir/out" "$dir/show_full"
run -c "$INI" outbound show 2 --dest S1
if [ "$rc" -eq 0 ] && cmp -s "$dir/out" "$dir/show_full"; then
	ok "outbound show SEQ --dest D is this node's message"
else
	bad "outbound show SEQ --dest D is this node's message"
fi
run -c "$INI" outbound show R1/S1/3
if [ "$rc" -eq 0 ] &&
	grep -qx 'result           0 processed' "$dir/out" &&
	grep -qx 'payload          4 bytes, binary (hex):' "$dir/out" &&
	[ "$(tail -1 "$dir/out")" = "00000000  61 00 62 ff                                       |a.b.|" ]; then
	ok "outbound show: a binary payload as a hex dump"
else
	bad "outbound show: a binary payload as a hex dump"
fi
run -c "$INI" outbound show R1/S1/3 --json
if [ "$rc" -eq 0 ] && pyjson '
import base64
assert base64.b64decode(d["payload"]) == b"a\x00b\xff", d
assert "payload_text" not in d, d
assert d["id"] == "R1/S1/3" and d["result_name"] == "processed", d
assert d["payload_len"] == 4'; then
	ok "outbound show --json: base64 payload, no payload_text for non-UTF-8"
else
	bad "outbound show --json: base64 payload, no payload_text for non-UTF-8"
fi
run -c "$INI" outbound show R1/S1/2 --json
if [ "$rc" -eq 0 ] && pyjson '
assert d["payload"] == "aGVsbG8=" and d["payload_text"] == "hello", d
assert d["last_error"].startswith("connection refused"), d'; then
	ok "outbound show --json: payload_text for a UTF-8 payload"
else
	bad "outbound show --json: payload_text for a UTF-8 payload"
fi
# Large payloads (written past the trigger, which checks only inserts):
# text cut at 4 KiB on a character boundary, binary dumped for 4 KiB.
python3 -c 'import sys; open(sys.argv[1], "wb").write(b"a" * 4095 + "é".encode() * 600)' "$dir/big.txt"
python3 -c 'import sys; open(sys.argv[1], "wb").write(bytes(range(256)) * 20)' "$dir/big4k.bin"
sql "UPDATE tb_0031 SET payload = readfile('$dir/big.txt') WHERE dest = 'S1' AND seq = 5"
sql "UPDATE tb_0031 SET payload = readfile('$dir/big4k.bin') WHERE dest = 'S1' AND seq = 6"
run -c "$INI" outbound show R1/S1/5
if [ "$rc" -eq 0 ] && grep -qx 'payload          5295 bytes, text:' "$dir/out" &&
	[ "$(tail -2 "$dir/out" | head -1)" = "$(printf 'a%.0s' $(seq 4095))" ] &&
	[ "$(tail -1 "$dir/out")" = "… 1200 more bytes" ]; then
	ok "outbound show: a long text payload stops at 4 KiB, not inside a character"
else
	bad "outbound show: a long text payload stops at 4 KiB, not inside a character"
fi
run -c "$INI" outbound show R1/S1/6
if [ "$rc" -eq 0 ] && grep -qx 'payload          5120 bytes, binary (hex):' "$dir/out" &&
	[ "$(grep -c '^0000' "$dir/out")" -eq 256 ] &&
	grep -qx '00000ff0  f0 f1 f2 f3 f4 f5 f6 f7  f8 f9 fa fb fc fd fe ff  |................|' "$dir/out" &&
	[ "$(tail -1 "$dir/out")" = "… 1024 more bytes" ]; then
	ok "outbound show: a long binary payload dumps 4 KiB, then the rest's size"
else
	bad "outbound show: a long binary payload dumps 4 KiB, then the rest's size"
fi
run -c "$INI" outbound show R1/S1/6 --json
if [ "$rc" -eq 0 ] && pyjson '
import base64
assert base64.b64decode(d["payload"]) == bytes(range(256)) * 20
assert "payload_text" not in d'; then
	ok "outbound show --json carries the whole payload"
else
	bad "outbound show --json carries the whole payload"
fi
sql "UPDATE tb_0031 SET payload = x'610062' WHERE dest = 'S1' AND seq = 4"
run -c "$INI" outbound show R1/S1/4 --json
if [ "$rc" -eq 0 ] && pyjson 'assert d["payload_text"] == "a\x00b", d'; then
	ok "outbound show --json: UTF-8 with a NUL still has payload_text"
else
	bad "outbound show --json: UTF-8 with a NUL still has payload_text"
fi
sql "UPDATE tb_0031 SET payload = x'', last_error = 'tab	and' || char(10) ||
	'newline ' || replace(hex(zeroblob(1000)), '0', 'e') || ' end'
	WHERE dest = 'S1' AND seq = 1"
run -c "$INI" outbound show R1/S1/1
if [ "$rc" -eq 0 ] &&
	grep -Eqx 'last_error       tab and newline e{2000} end' "$dir/out"; then
	ok "outbound show prints a long last_error whole, control characters as spaces"
else
	bad "outbound show prints a long last_error whole, control characters as spaces"
fi
run -c "$INI" outbound show R1/S1/1 --json
if [ "$rc" -eq 0 ] && pyjson '
assert d["payload"] == "" and d["payload_text"] == "" and d["payload_len"] == 0, d'; then
	ok "outbound show --json of an empty payload"
else
	bad "outbound show --json of an empty payload"
fi
run -c "$INI" outbound show R1/S1/1
if [ "$rc" -eq 0 ] && [ "$(tail -1 "$dir/out")" = "payload          0 bytes" ]; then
	ok "outbound show of an empty payload says 0 bytes"
else
	bad "outbound show of an empty payload says 0 bytes"
fi
run -c "$INI" outbound show R1/S1/99
if [ "$rc" -eq 1 ] && [ -z "$out" ] && [ "$(wc -l <"$dir/err")" -eq 1 ] &&
	[ "$err" = "semqctl: no outbound message R1/S1/99 in $dir/node.db" ]; then
	ok "outbound show of a message that is not there: exit 1, one line"
else
	bad "outbound show of a message that is not there: exit 1, one line"
fi

# -- message id syntax, shared by show and cancel --
for sub in show cancel; do
	C="outbound $sub"
	expect_usage_of "$C" "$sub without an id" \
		"outbound $sub: a message id ORIGIN/DEST/SEQ (or SEQ --dest D) is required" \
		-c "$INI" outbound "$sub"
	expect_usage_of "$C" "$sub with two ids" "unexpected argument 'R1/S1/2'" \
		-c "$INI" outbound "$sub" R1/S1/1 R1/S1/2
	expect_usage_of "$C" "$sub R1/S1" "'R1/S1' is not a message id ORIGIN/DEST/SEQ" \
		-c "$INI" outbound "$sub" R1/S1
	expect_usage_of "$C" "$sub R1/S1/1/2" "'R1/S1/1/2' is not a message id" \
		-c "$INI" outbound "$sub" R1/S1/1/2
	expect_usage_of "$C" "$sub R1//1" "'R1//1': destination '' is not a node id" \
		-c "$INI" outbound "$sub" R1//1
	expect_usage_of "$C" "$sub 'a b/S1/1'" "'a b/S1/1': origin 'a b' is not a node id" \
		-c "$INI" outbound "$sub" 'a b/S1/1'
	expect_usage_of "$C" "$sub R1/S1/0" "'R1/S1/0': seq '0' is not a number 1..9223372036854775807" \
		-c "$INI" outbound "$sub" R1/S1/0
	expect_usage_of "$C" "$sub seq over int64" "seq '9223372036854775808' is not a number" \
		-c "$INI" outbound "$sub" R1/S1/9223372036854775808
	expect_usage_of "$C" "$sub R1/S1/-1" "seq '-1' is not a number" \
		-c "$INI" outbound "$sub" R1/S1/-1
	expect_usage_of "$C" "$sub bare SEQ without --dest" \
		"'7' is a bare SEQ: give --dest D too" -c "$INI" outbound "$sub" 7
	expect_usage_of "$C" "$sub bare word" "'x7' is not a message id ORIGIN/DEST/SEQ nor a SEQ" \
		-c "$INI" outbound "$sub" x7 --dest S1
	expect_usage_of "$C" "$sub --dest with a full id" \
		"--dest D goes with a bare SEQ; 'R1/S1/1' names its destination" \
		-c "$INI" outbound "$sub" R1/S1/1 --dest S1
	expect_usage_of "$C" "$sub --dest 'bad id'" "--dest 'bad id' is not a node id" \
		-c "$INI" outbound "$sub" 1 --dest 'bad id'
	expect_usage_of "$C" "$sub unknown option" "unknown option '--status'" \
		-c "$INI" outbound "$sub" R1/S1/1 --status 0
done
if [ "$(sql "SELECT count(*) FROM tb_0031 WHERE status = -2")" = 0 ]; then
	ok "no usage error of cancel cancelled anything"
else
	rc=-
	bad "no usage error of cancel cancelled anything"
fi

# -- cancel --
before=$(($(date +%s) * 1000 - 1000))
run -c "$INI" outbound cancel R1/S1/2
if [ "$rc" -eq 0 ] && [ "$out" = "cancelled R1/S1/2; a tombstone will be sent" ] &&
	[ "$err" = "semqctl: no semqd is running on $dir/node.db to wake; the tombstone is sent when it starts" ] &&
	[ "$(sql "SELECT status, result IS NULL, next_attempt_at >= $before FROM tb_0031 WHERE dest = 'S1' AND seq = 2")" = "-2|1|1" ]; then
	ok "outbound cancel of a sent message: -2, tombstone due now, notes no daemon"
else
	bad "outbound cancel of a sent message: -2, tombstone due now, notes no daemon"
fi
run -c "$INI" outbound cancel 1 --dest S1 --json
if [ "$rc" -eq 0 ] && pyjson '
assert d == {"id": "R1/S1/1", "cancelled": True, "status": -2,
    "already_cancelled": False, "woke_daemon": False}, d' &&
	[ "$(sql "SELECT status FROM tb_0031 WHERE dest = 'S1' AND seq = 1")" = -2 ]; then
	ok "outbound cancel SEQ --dest D --json of an unsent message"
else
	bad "outbound cancel SEQ --dest D --json of an unsent message"
fi
run -c "$INI" outbound cancel R1/S1/4
if [ "$rc" -eq 0 ] && [ "$(sql "SELECT status FROM tb_0031 WHERE dest = 'S1' AND seq = 4")" = -2 ]; then
	ok "outbound cancel of a relay-acked message"
else
	bad "outbound cancel of a relay-acked message"
fi
sql "UPDATE tb_0031 SET result = 4 WHERE dest = 'S1' AND seq = 4"
row4=$(sql "SELECT * FROM tb_0031 WHERE dest = 'S1' AND seq = 4")
run -c "$INI" outbound cancel R1/S1/4
if [ "$rc" -eq 0 ] && [ "$out" = "R1/S1/4 was already cancelled" ] &&
	[ "$(sql "SELECT * FROM tb_0031 WHERE dest = 'S1' AND seq = 4")" = "$row4" ]; then
	ok "outbound cancel of a cancelled message: exit 0, row unchanged"
else
	bad "outbound cancel of a cancelled message: exit 0, row unchanged"
fi
run -c "$INI" outbound cancel R1/S1/4 --json
if [ "$rc" -eq 0 ] && pyjson '
assert d["cancelled"] is True and d["already_cancelled"] is True and d["status"] == -2, d'; then
	ok "outbound cancel --json of a cancelled message says already_cancelled"
else
	bad "outbound cancel --json of a cancelled message says already_cancelled"
fi
row3=$(sql "SELECT * FROM tb_0031 WHERE dest = 'S1' AND seq = 3")
run -c "$INI" outbound cancel R1/S1/3
if [ "$rc" -eq 1 ] && [ -z "$out" ] &&
	[ "$err" = "semqctl: R1/S1/3 is already confirmed (result processed); it cannot be cancelled" ] &&
	[ "$(sql "SELECT * FROM tb_0031 WHERE dest = 'S1' AND seq = 3")" = "$row3" ]; then
	ok "outbound cancel of a confirmed message: exit 1, row unchanged"
else
	bad "outbound cancel of a confirmed message: exit 1, row unchanged"
fi
run -c "$INI" --json outbound cancel 3 --dest S1
if [ "$rc" -eq 1 ] && pyjson '
assert d == {"id": "R1/S1/3", "cancelled": False, "status": 100,
    "already_cancelled": False, "woke_daemon": False}, d' &&
	[[ "$err" == *"already confirmed"* ]]; then
	ok "outbound cancel --json of a confirmed message: cancelled false, exit 1"
else
	bad "outbound cancel --json of a confirmed message: cancelled false, exit 1"
fi
run -c "$INI" outbound cancel R1/S1/99
if [ "$rc" -eq 1 ] && [ -z "$out" ] &&
	[ "$err" = "semqctl: no outbound message R1/S1/99 in $dir/node.db" ]; then
	ok "outbound cancel of a message that is not there: exit 1, one line"
else
	bad "outbound cancel of a message that is not there: exit 1, one line"
fi
# A relay's store-and-forward copy of another origin's message.
sql "INSERT INTO tb_0031(origin, dest, seq, type, payload, created_at)
	VALUES ('X9', 'S1', 1, 1, x'', 1700000000000)"
run -c "$INI" outbound cancel X9/S1/1
if [ "$rc" -eq 1 ] && [ -z "$out" ] &&
	[ "$err" = "semqctl: X9/S1/1 is a copy this node holds for origin X9; only the origin can cancel it" ] &&
	[ "$(sql "SELECT status FROM tb_0031 WHERE origin = 'X9'")" = 0 ]; then
	ok "outbound cancel of another origin's copy is refused, exit 1"
else
	bad "outbound cancel of another origin's copy is refused, exit 1"
fi
run -c "$INI" outbound list --status cancelled
if [ "$rc" -eq 0 ] &&
	[ "$(awk 'NR > 1 { print $1 }' "$dir/out" | tr '\n' ' ')" = "R1/S1/4 R1/S1/2 R1/S1/1 " ] &&
	grep -Eq '^R1/S1/4 +.* -2 cancelled +cancelled ' "$dir/out" &&
	grep -Eq '^R1/S1/1 +.* -2 cancelled +- ' "$dir/out"; then
	ok "outbound list --status cancelled: answered (result cancelled) and not"
else
	bad "outbound list --status cancelled: answered (result cancelled) and not"
fi

# cancel wakes a listening daemon (the stand-in of the send test).
rm -f "$dir/ready"
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
run -c "$INI" outbound cancel 5 --dest S1 --json
wait "$waker" || true
if [ "$rc" -eq 0 ] && [ -z "$err" ] && [ "$(cat "$dir/woken")" = w ] &&
	pyjson 'assert d["woke_daemon"] is True and d["id"] == "R1/S1/5", d'; then
	ok "outbound cancel wakes a listening daemon: woke_daemon true"
else
	bad "outbound cancel wakes a listening daemon: woke_daemon true"
fi

run -c "$dir/garbage.ini" outbound list
if [ "$rc" -eq 1 ] && [ "$(wc -l <"$dir/err")" -eq 1 ]; then
	ok "outbound list on a database that cannot be opened is exit 1"
else
	bad "outbound list on a database that cannot be opened is exit 1"
fi
run -c "$dir/garbage.ini" outbound cancel R1/S1/6
if [ "$rc" -eq 1 ] && [ "$(wc -l <"$dir/err")" -eq 1 ]; then
	ok "outbound cancel on a database that cannot be opened is exit 1"
else
	bad "outbound cancel on a database that cannot be opened is exit 1"
fi
run -c "$dir/bad.ini" outbound show R1/S1/6
if [ "$rc" -eq 2 ] && [[ "$err" == *bad.ini:3:* ]]; then
	ok "outbound show with a bad configuration is exit 2 naming bad.ini:3"
else
	bad "outbound show with a bad configuration is exit 2 naming bad.ini:3"
fi

finished=1
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
