#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# CLI test of semqctl: status on a fresh and on a filled database, send with
# each payload source, outbound list/show/cancel over rows in every status,
# redo list/show/retry/discard and received list over a redo queue and a
# received record written by hand, --json output, and the exit codes of
# SPEC §8 (0 ok, 1 runtime failure, 2 usage or configuration error, each
# with a message that names the culprit).
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

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
cli_begin test_semqctl
CLI_BAD_SHOWS=run

# run ARGS...: runs semqctl with stdin from $IN (default /dev/null); sets rc,
# and leaves stdout/stderr in $dir/out and $dir/err (and in $out, $err).
IN=/dev/null
run() {
	capture "$SEMQCTL" "$@" <"$IN"
}

# The operator's line semqctl prints for a change it made ("semqctl:
# operator USER (pid N) on DB: WHAT"): op_said WHAT says whether stderr
# has it; err_rest is stderr without it.
op_said() {
	grep -Eq "^semqctl: operator [^ ]+ \(pid [0-9]+\) on .*: $(printf '%s' "$1" | sed 's/[][().*^$]/\\&/g')\$" "$dir/err"
}
err_rest() {
	grep -Ev '^semqctl: operator [^ ]+ \(pid [0-9]+\) on ' "$dir/err" || true
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
if [ "$rc" -eq 0 ] && [[ "$out" == *"semqctl [-c node.ini] [--json] status"* ]] &&
	[ ! -e "$dir/node.db" ]; then
	ok "status --help exits 0 and does not touch the database"
else
	bad "status --help exits 0 and does not touch the database"
fi

# ---- status on a new database ------------------------------------------------
run -c "$INI" status
if [ "$rc" -eq 1 ] && [ -z "$out" ] &&
	[ "$err" = "semqctl: database $dir/node.db does not exist (the node creates it on first start; semqctl --create to create it now)" ] &&
	[ ! -e "$dir/node.db" ]; then
	ok "status refuses a database that does not exist, exit 1, creates nothing"
else
	bad "status refuses a database that does not exist, exit 1, creates nothing"
fi
run -c "$INI" --create status
if [ "$rc" -eq 0 ] && [[ "$out" == *"no messages"* ]] &&
	[[ "$out" == *R1* ]] && [[ "$out" == *"$dir/node.db"* ]] &&
	[ -s "$dir/node.db" ]; then
	ok "status --create creates the database and shows 'no messages'"
else
	bad "status --create creates the database and shows 'no messages'"
fi
run --config="$INI" status --json
if [ "$rc" -eq 0 ] && pyjson '
assert d["node"] == "R1", d
assert d["db"].endswith("/node.db"), d
assert isinstance(d["schema_version"], int) and d["schema_version"] >= 1, d
assert len(d["life"]) == 16 and d["life"] not in ("0" * 16, "0" * 15 + "1"), d
assert d["queues"] == [] and d["streams_in"] == [] and d["streams_out"] == [], d'; then
	ok "status --json on an empty database (--config=FILE form)"
else
	bad "status --json on an empty database (--config=FILE form)"
fi

# ---- the issue's acceptance check: a bare INSERT is a queued message ---------
# (numbered by the daemon's next batch, or here by `semqctl send` below,
# which numbers the rows before its own: migration 0007)
sql "INSERT INTO tb_0031(dest,type,msg_key,payload) VALUES('S1',2800,'K1',x'00')"
if [ "$(sql 'SELECT quote(origin), quote(seq), status FROM tb_0031')" = "NULL|NULL|0" ]; then
	ok "a bare INSERT is queued unnumbered: origin and seq NULL, status 0"
else
	rc=-
	bad "a bare INSERT is queued unnumbered: origin and seq NULL, status 0"
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
		ok "'$form' shows the inserted row: outbound R1 S1 unsent 1"
	else
		bad "'$form' shows the inserted row: outbound R1 S1 unsent 1"
	fi
done
run -c "$INI" status
if [ "$rc" -eq 0 ] &&
	grep -Eq '^TABLE +ORIGIN +DEST +STATUS +COUNT +OLDEST$' "$dir/out" &&
	grep -Eq '^outbound +R1 +S1 +unsent +1 +[0-9]+s$' "$dir/out" &&
	! grep -q 'no messages' "$dir/out"; then
	ok "status prints an aligned table with the row and its age"
else
	bad "status prints an aligned table with the row and its age"
fi

# ---- send: each payload source takes the next seq --------------------------
# (the bare INSERT above is numbered first: R1/S1/1)
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
		[[ "$(head -1 "$dir/out")" == "Usage: semqctl [-c node.ini] [--json] outbound $sub"* ]]; then
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
	grep -Eq '^R1/S1/3 +7 +- +confirmed +processed +1 +[0-9]+s +-$' "$dir/out" &&
	grep -Eq '^R1/S1/4 +4294967295 +- +relay-acked +- +1 +[0-9]+s +-$' "$dir/out" &&
	grep -Eq '^R1/S1/1 +2800 +K1 +unsent +- +0 +[0-9]+s +-$' "$dir/out"; then
	ok "outbound list: aligned table of every row, newest first"
else
	bad "outbound list: aligned table of every row, newest first"
fi
short=$(grep '^R1/S1/2 ' "$dir/out" | sed -E 's/.* [0-9]+s +//')
if [ "$short" = "${longerr:0:40}…" ] &&
	grep -Eq '^R1/S1/2 +2800 +K1 +sent +- +2 +[0-9]+s ' "$dir/out"; then
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
    "last_error", "payload_len", "custodian"}
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
	grep -Eq '^R1/S1/4 +.* cancelled +cancelled ' "$dir/out" &&
	grep -Eq '^R1/S1/1 +.* cancelled +- ' "$dir/out"; then
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

# ---- redo list, show, retry, discard; received list -------------------------
# A receiving node S1 with its own database; its redo queue and received
# record are filled by hand (plain tables) in every state the commands show.
cat >"$dir/s1.ini" <<EOF
[node]
id = S1
db = s1.db

[redo]
levels = 5s,30s,1m
max_tries = 3
EOF
S1=$dir/s1.ini
s1sql() {
	sqlite3 "$dir/s1.db" "$1"
}
nowms() {
	date +%s%3N
}

# start_waker: the stand-in of semqd's wake socket (see the send test) for
# s1.db, in the background; $waker is its pid, what it receives goes to
# $dir/woken.
start_waker() {
	rm -f "$dir/ready" "$dir/woken"
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
' "$dir/s1.db" "$dir/ready" >"$dir/woken" &
	waker=$!
	for _ in $(seq 100); do
		[ -e "$dir/ready" ] && break
		sleep 0.1
	done
}

run --help
if [ "$rc" -eq 0 ] && [[ "$out" == *"redo list"* ]] && [[ "$out" == *"redo show"* ]] &&
	[[ "$out" == *"redo retry"* ]] && [[ "$out" == *"redo discard"* ]] &&
	[[ "$out" == *"received list"* ]]; then
	ok "--help lists redo list, show, retry, discard and received list"
else
	bad "--help lists redo list, show, retry, discard and received list"
fi
for sub in "redo list" "redo show" "redo retry" "redo discard" "received list"; do
	# shellcheck disable=SC2086
	run $sub --help
	if [ "$rc" -eq 0 ] && [ -z "$err" ] &&
		[[ "$(head -1 "$dir/out")" == "Usage: semqctl [-c node.ini] [--json] $sub"* ]]; then
		ok "$sub --help prints its usage, exit 0"
	else
		bad "$sub --help prints its usage, exit 0"
	fi
done
expect_usage "redo without a subcommand" \
	"'redo' needs one of: list, show, retry, discard" -c "$S1" redo
expect_usage "redo with an unknown subcommand" \
	"'redo' needs one of: list, show, retry, discard" -c "$S1" redo frob
expect_usage "received without a subcommand" "'received' needs one of: list" \
	-c "$S1" received

run -c "$S1" --create redo list
if [ "$rc" -eq 0 ] && [ "$out" = "no redo entries" ] && [ -s "$dir/s1.db" ]; then
	ok "redo list on a new database: 'no redo entries'"
else
	bad "redo list on a new database: 'no redo entries'"
fi
run -c "$S1" redo list --json
if [ "$rc" -eq 0 ] && pyjson 'assert d == [], d'; then
	ok "redo list --json with no entries is []"
else
	bad "redo list --json with no entries is []"
fi
run -c "$S1" received list
if [ "$rc" -eq 0 ] && [ "$out" = "no received messages" ]; then
	ok "received list on a new database: 'no received messages'"
else
	bad "received list on a new database: 'no received messages'"
fi
run -c "$S1" received list --json
if [ "$rc" -eq 0 ] && pyjson 'assert d == {"received": [], "streams_in": []}, d'; then
	ok "received list --json on a new database"
else
	bad "received list --json on a new database"
fi

# The redo queue: key K1 with a dead head (1) and two entries waiting behind
# it (2; 3 with a deliver_at an hour ahead), pending entries (4 in 25 s,
# 5 due), one done (6), one discarded (7), dead ones (8, 9, 10), and key K5
# with a pending head (11) and two waiting (12, 13).
now=$(nowms)
later=$((now + 3600000))
rerr="plugin bill: line 3: quantity x is not a number; the document is refused"
s1sql "INSERT INTO tb_0033(id, origin, dest, seq, type, msg_key, prev_seq,
	deliver_at, msg_created_at, payload, status, tries, level,
	next_attempt_at, last_error, discard_reason, created_at, updated_at)
	VALUES
	(1, 'R1', 'S1', 7, 2800, 'K1', 0, 0, 1700000000000, CAST('hello' AS BLOB),
	 -1, 3, 3, $now - 1000, '$rerr', NULL, $now - 60000, $now - 1000),
	(2, 'R1', 'S1', 8, 2800, 'K1', 7, 0, 1700000000000, x'00ff',
	 1, 0, 0, 0, NULL, NULL, $now - 50000, $now - 50000),
	(3, 'R1', 'S1', 9, 2800, 'K1', 8, $later, 1700000000000, x'',
	 1, 0, 0, 0, NULL, NULL, $now - 40000, $now - 40000),
	(4, 'R2', 'S1', 1, 7, NULL, 0, 0, 0, CAST('x' AS BLOB),
	 0, 1, 1, $now + 25000, 'timeout', NULL, $now - 5000, $now - 5000),
	(5, 'R2', 'S1', 2, 7, NULL, 0, 0, 0, CAST('y' AS BLOB),
	 0, 0, 0, $now - 5, NULL, NULL, $now - 5000, $now - 5000),
	(6, 'R2', 'S1', 3, 7, 'K2', 0, 0, 0, x'',
	 2, 1, 0, $now - 9000, NULL, NULL, $now - 9000, $now - 8000),
	(7, 'R2', 'S1', 4, 7, 'K3', 0, 0, 0, x'',
	 -2, 3, 3, $now - 9000, 'bad', 'duplicate bill', $now - 9000, $now - 8000),
	(8, 'R3', 'S1', 1, 9, 'K4', 0, 0, 0, x'',
	 -1, 3, 3, $now - 9000, 'down', NULL, $now - 9000, $now - 8000),
	(9, 'R3', 'S1', 2, 9, NULL, 0, 0, 0, x'',
	 -1, 1, 0, $now - 9000, 'permanent', NULL, $now - 9000, $now - 8000),
	(10, 'R3', 'S1', 3, 9, NULL, 0, 0, 0, x'',
	 -1, 3, 3, $now - 9000, 'down', NULL, $now - 9000, $now - 8000),
	(11, 'R1', 'S1', 20, 2800, 'K5', 0, 0, 0, x'',
	 0, 2, 2, $now + 600000, 'busy', NULL, $now - 9000, $now - 8000),
	(12, 'R1', 'S1', 21, 2800, 'K5', 20, 0, 0, x'',
	 1, 0, 0, 0, NULL, NULL, $now - 9000, $now - 9000),
	(13, 'R1', 'S1', 22, 2800, 'K5', 21, 0, 0, x'',
	 1, 0, 0, 0, NULL, NULL, $now - 9000, $now - 9000)"

# -- redo list --
run -c "$S1" redo list
ids=$(awk 'NR > 1 { print $1 }' "$dir/out" | tr '\n' ' ')
if [ "$rc" -eq 0 ] && [ -z "$err" ] &&
	grep -Eqx 'ID +MESSAGE +TYPE +KEY +STATUS +TRIES +LEVEL +NEXT +LAST_ERROR' "$dir/out" &&
	[ "$ids" = "1 2 3 4 5 6 7 8 9 10 11 12 13 " ] &&
	grep -Eqx "1 +R1/S1/7 +2800 +K1 +dead +3 +3 +- +${rerr:0:40}…" "$dir/out" &&
	grep -Eqx '2 +R1/S1/8 +2800 +K1 +waiting +0 +0 +- +waiting behind dead #1 \(R1/S1/7\): retry or discard it first' "$dir/out" &&
	grep -Eqx '12 +R1/S1/21 +2800 +K5 +waiting +0 +0 +- +waiting behind #11 \(R1/S1/20\), next tried [0-9T:-]+Z' "$dir/out" &&
	grep -Eqx '4 +R2/S1/1 +7 +- +pending +1 +1 +in [0-9]+s +timeout' "$dir/out" &&
	grep -Eqx '5 +R2/S1/2 +7 +- +pending +0 +0 +due +-' "$dir/out" &&
	grep -Eqx '6 +R2/S1/3 +7 +K2 +done +1 +0 +- +-' "$dir/out" &&
	grep -Eqx '7 +R2/S1/4 +7 +K3 +discarded +3 +3 +- +bad' "$dir/out" &&
	grep -Eqx '11 +R1/S1/20 +2800 +K5 +pending +2 +2 +in (9|10)m +busy' "$dir/out"; then
	ok "redo list: aligned table of every entry, NEXT and a shortened LAST_ERROR"
else
	bad "redo list: aligned table of every entry, NEXT and a shortened LAST_ERROR"
fi
run -c "$S1" --json redo list
if [ "$rc" -eq 0 ] && pyjson '
cols = {"id", "message", "origin", "dest", "seq", "type", "key", "prev_seq",
    "deliver_at", "msg_created_at", "status", "status_name", "tries", "level",
    "next_attempt_at", "created_at", "updated_at", "last_error",
    "discard_reason", "payload_len"}
assert [x["id"] for x in d] == list(range(1, 14)), d
# a waiting entry also says what it waits for
assert all(set(x) == cols | ({"behind"} if x["status_name"] == "waiting"
    else set()) for x in d), [set(x) ^ cols for x in d]
assert d[1]["behind"]["id"] == 1 and d[1]["behind"]["status_name"] == "dead" \
    and d[1]["behind"]["text"].startswith("waiting behind dead #1"), d[1]
assert d[11]["behind"]["id"] == 11 and not d[11]["behind"]["delayed"], d[11]
r = {x["id"]: x for x in d}
x = r[1]
assert (x["message"], x["origin"], x["dest"], x["seq"], x["type"], x["key"],
    x["status"], x["status_name"], x["tries"], x["level"], x["payload_len"],
    x["msg_created_at"], x["discard_reason"]) == ("R1/S1/7", "R1", "S1", 7,
    2800, "K1", -1, "dead", 3, 3, 5, 1700000000000, None), x
assert x["last_error"].startswith("plugin bill: line 3") and x["last_error"].endswith("refused"), x
assert r[3]["deliver_at"] > x["created_at"] and r[3]["prev_seq"] == 8, r[3]
assert r[4]["key"] is None and r[4]["status_name"] == "pending", r[4]
assert r[7]["discard_reason"] == "duplicate bill" and r[7]["status"] == -2, r[7]
assert r[2]["status_name"] == "waiting" and r[6]["status_name"] == "done"'; then
	ok "redo list --json: an array of objects with every column"
else
	bad "redo list --json: an array of objects with every column"
fi
for st in dead -1; do
	run -c "$S1" redo list --status "$st"
	if [ "$rc" -eq 0 ] && [ "$(awk 'NR > 1 { print $1 }' "$dir/out" | tr '\n' ' ')" = "1 8 9 10 " ]; then
		ok "redo list --status $st shows the dead entries"
	else
		bad "redo list --status $st shows the dead entries"
	fi
done
for pair in "pending:4 5 11 " "waiting:2 3 12 13 " "done:6 " "discarded:7 " \
	"0:4 5 11 " "1:2 3 12 13 " "2:6 " "-2:7 "; do
	run -c "$S1" redo list --json --status "${pair%%:*}"
	if [ "$rc" -eq 0 ] && [ "$(python3 -c 'import json,sys; print(" ".join(str(x["id"]) for x in json.load(open(sys.argv[1]))), end=" ")' "$dir/out")" = "${pair#*:}" ]; then
		ok "redo list --status ${pair%%:*} shows ${pair#*:}"
	else
		bad "redo list --status ${pair%%:*} shows ${pair#*:}"
	fi
done
run -c "$S1" redo list --limit 2
if [ "$rc" -eq 0 ] && [ "$(awk 'NR > 1 { print $1 }' "$dir/out" | tr '\n' ' ')" = "1 2 " ]; then
	ok "redo list --limit 2 prints the oldest two entries"
else
	bad "redo list --limit 2 prints the oldest two entries"
fi
R="redo list"
expect_usage_of "$R" "redo list --status bogus" \
	"redo list: --status 'bogus' is not pending, waiting, done, dead, discarded or 0, 1, 2, -1, -2" \
	-c "$S1" redo list --status bogus
expect_usage_of "$R" "redo list --status 3" "--status '3' is not" \
	-c "$S1" redo list --status 3
# The --status values of each listing's synopsis (what the bash completion
# offers) are the names its refusal lists, which come from the table of
# names (semq_status_list): a status added to one is added to the other.
for lc in "outbound list:$INI" "redo list:$S1"; do
	# shellcheck disable=SC2086 # the command's two words
	run help ${lc%%:*}
	syn=$(head -1 "$dir/out" | grep -oE -- '--status [a-z|-]+' |
		cut -d' ' -f2 | tr '|' '\n' | grep . | sort | tr '\n' ' ')
	# shellcheck disable=SC2086
	run -c "${lc#*:}" ${lc%%:*} --status bogus
	names=$(sed -n "1s/.* is not \(.*\) or [-0-9, ]*\$/\1/p" "$dir/err" |
		sed 's/, /\n/g' | sort | tr '\n' ' ')
	if [ -n "$names" ] && [ "$syn" = "$names" ]; then
		ok "${lc%%:*}: the synopsis' --status values are the table's names"
	else
		bad "${lc%%:*}: the synopsis' --status values ($syn) are the table's names ($names)"
	fi
done
expect_usage_of "$R" "redo list --status sent" "--status 'sent' is not" \
	-c "$S1" redo list --status sent
expect_usage_of "$R" "redo list --limit 0" "--limit '0' is not a number 1..100000" \
	-c "$S1" redo list --limit 0
expect_usage_of "$R" "redo list --limit x" "--limit 'x' is not a number" \
	-c "$S1" redo list --limit x
expect_usage_of "$R" "redo list takes no argument" "unexpected argument '3'" \
	-c "$S1" redo list 3
expect_usage_of "$R" "redo list unknown option" "unknown option '--origin'" \
	-c "$S1" redo list --origin S1

# -- filters, groups, bulk dry run (docs/OPERATIONS.md, "Dead letters") --
run -c "$S1" --json redo list --status dead --group-by error
if [ "$rc" -eq 0 ] && [ -z "$err" ] && pyjson '
g = {x["error"][:10]: (x["count"], x["dests"]) for x in d["groups"]}
assert d["groups"][0]["error"] == "down" and g["down"] == (2, ["S1"]), d
assert sorted(x["count"] for x in d["groups"]) == [1, 1, 2], d'; then
	ok "redo list --group-by error: one group per last_error, largest first"
else
	bad "redo list --group-by error: one group per last_error, largest first"
fi
run -c "$S1" redo list --status dead --group-by error
if [ "$rc" -eq 0 ] && grep -Eq '^COUNT +OLDEST +NEWEST +DESTS +ERROR$' "$dir/out" &&
	grep -Eq '^2 +[0-9]+s +[0-9]+s +S1 +down$' "$dir/out"; then
	ok "redo list --group-by error (text): COUNT OLDEST NEWEST DESTS ERROR"
else
	bad "redo list --group-by error (text): COUNT OLDEST NEWEST DESTS ERROR"
fi
run -c "$S1" --json redo list --key K1 --where error~QUANTITY
if [ "$rc" -eq 0 ] && pyjson 'assert [x["id"] for x in d] == [1], d'; then
	ok "redo list --key --where: the key's entries whose error matches, any case"
else
	bad "redo list --key --where: the key's entries whose error matches, any case"
fi
run -c "$S1" --json redo retry --where error~DOWN --dest S1 --since 1d --dry-run
if [ "$rc" -eq 0 ] && [ -z "$err" ] && pyjson '
assert d["dry_run"] is True and d["count"] == 2, d
assert [x["id"] for x in d["entries"]] == [8, 10], d' &&
	[ "$(s1sql "SELECT count(*) FROM tb_0033 WHERE status = -1")" = 4 ]; then
	ok "redo retry --where --dry-run: lists the entries, changes nothing"
else
	bad "redo retry --where --dry-run: lists the entries, changes nothing"
fi
expect_usage_of "$R" "redo list --since yesterday" "--since 'yesterday' is not" \
	-c "$S1" redo list --since yesterday
expect_usage_of "$R" "redo list --where key~x" "--where 'key~x' is not error~TEXT" \
	-c "$S1" redo list --where key~x
expect_usage_of "$R" "redo list --group-by dest" "--group-by 'dest': only 'error'" \
	-c "$S1" redo list --group-by dest
expect_usage_of "redo retry" "redo retry --where --status pending" \
	"--status 'pending': only dead entries can be retried" \
	-c "$S1" redo retry --where error~x --status pending
expect_usage_of "redo retry" "redo retry ID --where" "an ID ('3') and --where" \
	-c "$S1" redo retry 3 --where error~x
expect_usage_of "redo retry" "redo retry --dest without --where" \
	"--where EXPR is required" -c "$S1" redo retry --dest S1 --dry-run
expect_usage_of "redo discard" "redo discard --where without --reason" \
	"--reason TEXT is required" -c "$S1" redo discard --where error~x
expect_usage_of "outbound list" "outbound list --since 5x" "--since '5x' is not" \
	-c "$S1" outbound list --since 5x
expect_usage_of "received list" "received list --key ''" "--key '' is not a key" \
	-c "$S1" received list --key ''

# -- redo show --
run -c "$S1" redo show 1
if [ "$rc" -eq 0 ] && [ -z "$err" ] &&
	grep -qx 'id               1' "$dir/out" &&
	grep -qx 'message          R1/S1/7' "$dir/out" &&
	grep -qx 'type             2800' "$dir/out" &&
	grep -qx 'key              K1' "$dir/out" &&
	grep -qx 'prev_seq         0' "$dir/out" &&
	grep -qx 'deliver_at       -' "$dir/out" &&
	grep -qx 'msg_created_at   1700000000000 (2023-11-14T22:13:20.000Z)' "$dir/out" &&
	grep -qx 'status           -1 dead' "$dir/out" &&
	grep -qx 'tries            3 (max_tries 3)' "$dir/out" &&
	grep -qx 'level            3' "$dir/out" &&
	grep -Eqx "next_attempt_at  $((now - 1000)) \([0-9-]{10}T[0-9:.]{12}Z\), not scheduled: dead" "$dir/out" &&
	grep -Eqx "created_at       $((now - 60000)) \([0-9-]{10}T[0-9:.]{12}Z\)" "$dir/out" &&
	grep -qx "last_error       $rerr" "$dir/out" &&
	grep -qx 'discard_reason   -' "$dir/out" &&
	[ "$(tail -2 "$dir/out")" = "payload          5 bytes, text:
hello" ]; then
	ok "redo show: every column, the whole last_error and the text payload"
else
	bad "redo show: every column, the whole last_error and the text payload"
fi
run -c "$S1" redo show 4
if [ "$rc" -eq 0 ] &&
	grep -Eqx "next_attempt_at  $((now + 25000)) \([0-9-]{10}T[0-9:.]{12}Z\), in [0-9]+s" "$dir/out" &&
	grep -qx 'level            1 (a retryable failure would wait 30s)' "$dir/out" &&
	grep -qx 'tries            1 (max_tries 3)' "$dir/out"; then
	ok "redo show of a pending entry: next attempt in UTC and relative, the next backoff"
else
	bad "redo show of a pending entry: next attempt in UTC and relative, the next backoff"
fi
run -c "$S1" redo show 5
if [ "$rc" -eq 0 ] && grep -Eq '^next_attempt_at  [0-9]{13} \(.*Z\), due$' "$dir/out" &&
	grep -qx 'level            0 (a retryable failure would wait 5s)' "$dir/out"; then
	ok "redo show of a due entry says due"
else
	bad "redo show of a due entry says due"
fi
run -c "$S1" redo show 11
if [ "$rc" -eq 0 ] && grep -qx 'level            2 (a retryable failure would make it dead)' "$dir/out"; then
	ok "redo show: at max_tries a retryable failure would make it dead"
else
	bad "redo show: at max_tries a retryable failure would make it dead"
fi
run -c "$S1" redo show 2
if [ "$rc" -eq 0 ] &&
	grep -qx 'next_attempt_at  -, not scheduled: waiting behind an earlier entry of its key' "$dir/out" &&
	grep -qx 'payload          2 bytes, binary (hex):' "$dir/out" &&
	[ "$(tail -1 "$dir/out")" = "00000000  00 ff                                             |..|" ]; then
	ok "redo show of a waiting entry: not scheduled, binary payload as a hex dump"
else
	bad "redo show of a waiting entry: not scheduled, binary payload as a hex dump"
fi
run -c "$S1" redo show 7
if [ "$rc" -eq 0 ] && grep -qx 'discard_reason   duplicate bill' "$dir/out" &&
	grep -Eqx 'next_attempt_at  [0-9]{13} \(.*Z\), not scheduled: discarded' "$dir/out" &&
	[ "$(tail -1 "$dir/out")" = "payload          0 bytes" ]; then
	ok "redo show of a discarded entry shows its discard_reason"
else
	bad "redo show of a discarded entry shows its discard_reason"
fi
run -c "$S1" redo show 1 --json
if [ "$rc" -eq 0 ] && pyjson '
assert d["id"] == 1 and d["message"] == "R1/S1/7" and d["status"] == -1, d
assert d["payload"] == "aGVsbG8=" and d["payload_text"] == "hello", d
assert d["last_error"].endswith("the document is refused"), d
assert d["payload_len"] == 5 and d["level"] == 3 and d["tries"] == 3, d'; then
	ok "redo show --json: every column, payload base64 and payload_text"
else
	bad "redo show --json: every column, payload base64 and payload_text"
fi
run -c "$S1" --json redo show 2
if [ "$rc" -eq 0 ] && pyjson '
assert d["payload"] == "AP8=" and "payload_text" not in d, d
assert d["status_name"] == "waiting" and d["prev_seq"] == 7, d'; then
	ok "redo show --json: no payload_text for a payload that is not UTF-8"
else
	bad "redo show --json: no payload_text for a payload that is not UTF-8"
fi
run -c "$S1" redo show 99
if [ "$rc" -eq 1 ] && [ -z "$out" ] &&
	[ "$err" = "semqctl: no redo entry 99 in $dir/s1.db" ]; then
	ok "redo show of an entry that is not there: exit 1, one line"
else
	bad "redo show of an entry that is not there: exit 1, one line"
fi
for sub in show retry discard; do
	C="redo $sub"
	extra=()
	[ "$sub" = discard ] && extra=(--reason r)
	expect_usage_of "$C" "redo $sub abc" "redo $sub: 'abc' is not a redo entry ID 1..9223372036854775807" \
		-c "$S1" redo "$sub" abc "${extra[@]}"
	expect_usage_of "$C" "redo $sub 0" "'0' is not a redo entry ID" \
		-c "$S1" redo "$sub" 0 "${extra[@]}"
	expect_usage_of "$C" "redo $sub -1" "'-1' is not a redo entry ID" \
		-c "$S1" redo "$sub" "${extra[@]}" -- -1
	expect_usage_of "$C" "redo $sub over int64" "'9223372036854775808' is not a redo entry ID" \
		-c "$S1" redo "$sub" 9223372036854775808 "${extra[@]}"
	expect_usage_of "$C" "redo $sub two ids" "unexpected argument '2'" \
		-c "$S1" redo "$sub" 1 2 "${extra[@]}"
done
expect_usage_of "redo show" "redo show --reason" "redo show: unknown option '--reason'" \
	-c "$S1" redo show 1 --reason r
expect_usage_of "redo show" "redo show without an id" "redo show: a redo entry ID is required" \
	-c "$S1" redo show

# -- redo retry --
row4=$(s1sql "SELECT * FROM tb_0033 WHERE id = 4")
run -c "$S1" redo retry 4
if [ "$rc" -eq 1 ] && [ -z "$out" ] &&
	[ "$err" = "semqctl: redo entry 4 (R2/S1/1) is pending; only dead entries can be retried" ] &&
	[ "$(s1sql "SELECT * FROM tb_0033 WHERE id = 4")" = "$row4" ]; then
	ok "redo retry of a pending entry: exit 1 naming its status, row unchanged"
else
	bad "redo retry of a pending entry: exit 1 naming its status, row unchanged"
fi
run -c "$S1" redo retry 6
if [ "$rc" -eq 1 ] &&
	[ "$err" = "semqctl: redo entry 6 (R2/S1/3) is done; only dead entries can be retried" ]; then
	ok "redo retry of a done entry: exit 1"
else
	bad "redo retry of a done entry: exit 1"
fi
run -c "$S1" redo retry 12 --json
if [ "$rc" -eq 1 ] && pyjson '
assert d == {"id": 12, "message": "R1/S1/21", "retried": False, "status": 1,
    "status_name": "waiting", "woke_daemon": False}, d' &&
	[ "$err" = "semqctl: redo entry 12 (R1/S1/21) is waiting; only dead entries can be retried" ]; then
	ok "redo retry --json of a waiting entry: retried false, exit 1"
else
	bad "redo retry --json of a waiting entry: retried false, exit 1"
fi
run -c "$S1" redo retry 99
if [ "$rc" -eq 1 ] && [ "$err" = "semqctl: no redo entry 99 in $dir/s1.db" ]; then
	ok "redo retry of an entry that is not there: exit 1"
else
	bad "redo retry of an entry that is not there: exit 1"
fi
RT="redo retry"
expect_usage_of "$RT" "redo retry without an id" \
	"redo retry: a redo entry ID (or --all-dead) is required" -c "$S1" redo retry
expect_usage_of "$RT" "redo retry ID --all-dead" \
	"--all-dead and an ID ('8') are both given; give one" \
	-c "$S1" redo retry 8 --all-dead
expect_usage_of "$RT" "redo retry --all-dead=yes" "--all-dead takes no value" \
	-c "$S1" redo retry --all-dead=yes
if [ "$(s1sql "SELECT group_concat(id) FROM (SELECT id FROM tb_0033
	WHERE status = -1 ORDER BY id)")" = "1,8,9,10" ]; then
	ok "no refused or mistyped retry changed a dead entry"
else
	rc=-
	bad "no refused or mistyped retry changed a dead entry"
fi
before=$(nowms)
start_waker
run -c "$S1" redo retry 8
wait "$waker" || true
after=$(nowms)
if [ "$rc" -eq 0 ] && [ "$out" = "R3/S1/1 (redo 8) will be retried now" ] &&
	[ -z "$(err_rest)" ] && op_said "retried redo entry 8 (R3/S1/1)" &&
	[ "$(cat "$dir/woken")" = w ] &&
	[ "$(s1sql "SELECT status, tries, level, last_error,
		next_attempt_at BETWEEN $before AND $after,
		updated_at BETWEEN $before AND $after FROM tb_0033 WHERE id = 8")" = "0|3|0|down|1|1" ]; then
	ok "redo retry ID: dead -> pending due now, level 0, tries kept; wakes the daemon"
else
	bad "redo retry ID: dead -> pending due now, level 0, tries kept; wakes the daemon"
fi
run -c "$S1" redo retry 8
if [ "$rc" -eq 1 ] &&
	[ "$err" = "semqctl: redo entry 8 (R3/S1/1) is pending; only dead entries can be retried" ]; then
	ok "redo retry of an entry just retried: exit 1, it is pending"
else
	bad "redo retry of an entry just retried: exit 1, it is pending"
fi

# -- redo discard --
D="redo discard"
reason1001=$(printf 'r%.0s' $(seq 1001))
reason1000=${reason1001:1}
expect_usage_of "$D" "redo discard without --reason" \
	"redo discard: --reason TEXT is required" -c "$S1" redo discard 1
expect_usage_of "$D" "redo discard --reason ''" "--reason '' is empty" \
	-c "$S1" redo discard 1 --reason ''
expect_usage_of "$D" "redo discard --reason of 1001 bytes" \
	"--reason is 1001 bytes long, at most 1000" \
	-c "$S1" redo discard 1 --reason "$reason1001"
expect_usage_of "$D" "redo discard without an id" \
	"redo discard: a redo entry ID is required" -c "$S1" redo discard --reason r
expect_usage_of "$D" "redo discard --reason without a value" "--reason needs a value TEXT" \
	-c "$S1" redo discard 1 --reason
if [ "$(s1sql "SELECT count(*) FROM tb_0033 WHERE status = -2")" = 1 ]; then
	ok "no mistyped discard discarded anything"
else
	rc=-
	bad "no mistyped discard discarded anything"
fi
before=$(nowms)
run -c "$S1" redo discard 1 --reason "bill 7 reissued as 12"
after=$(nowms)
if [ "$rc" -eq 0 ] && [ "$out" = "discarded R1/S1/7 (redo 1): bill 7 reissued as 12
released R1/S1/8 (redo 2), the next entry of key K1: pending, due now
1 more entry of key K1 still waits in key order" ] &&
	[ "$(err_rest)" = "semqctl: no semqd is running on $dir/s1.db to wake; released entries run when it starts" ] &&
	op_said "discarded redo entry 1 (R1/S1/7): bill 7 reissued as 12" &&
	[ "$(s1sql "SELECT status, discard_reason, updated_at BETWEEN $before AND $after
		FROM tb_0033 WHERE id = 1")" = "-2|bill 7 reissued as 12|1" ] &&
	[ "$(s1sql "SELECT status, next_attempt_at BETWEEN $before AND $after
		FROM tb_0033 WHERE id = 2")" = "0|1" ] &&
	[ "$(s1sql "SELECT status FROM tb_0033 WHERE id = 3")" = 1 ]; then
	ok "redo discard of a dead head: reason kept, the next waiting entry of the key released (1 -> 0)"
else
	bad "redo discard of a dead head: reason kept, the next waiting entry of the key released (1 -> 0)"
fi
start_waker
run -c "$S1" redo discard 2 --reason superseded --json
wait "$waker" || true
if [ "$rc" -eq 0 ] && [ -z "$(err_rest)" ] &&
	op_said "discarded redo entry 2 (R1/S1/8): superseded" &&
	[ "$(cat "$dir/woken")" = w ] && pyjson "
assert d == {'id': 2, 'message': 'R1/S1/8', 'discarded': True, 'status': -2,
    'discard_reason': 'superseded', 'released': [{'id': 3,
    'message': 'R1/S1/9', 'status': 0, 'next_attempt_at': $later}],
    'still_waiting': 0, 'woke_daemon': True}, d" &&
	[ "$(s1sql "SELECT status, next_attempt_at FROM tb_0033 WHERE id = 3")" = "0|$later" ]; then
	ok "redo discard --json of a pending head: releases the next at its deliver_at, wakes the daemon"
else
	bad "redo discard --json of a pending head: releases the next at its deliver_at, wakes the daemon"
fi
run -c "$S1" redo list --status pending
if [ "$rc" -eq 0 ] && grep -Eqx '3 +R1/S1/9 +2800 +K1 +pending +0 +0 +in (59m|1h) +-' "$dir/out"; then
	ok "redo list: the released entry is pending until its deliver_at"
else
	bad "redo list: the released entry is pending until its deliver_at"
fi
run -c "$S1" redo discard 3 --reason "last of K1"
if [ "$rc" -eq 0 ] && [ "$out" = "discarded R1/S1/9 (redo 3): last of K1
no entry of key K1 was waiting behind it" ] && [ -z "$(err_rest)" ] &&
	[ "$(s1sql "SELECT status FROM tb_0033 WHERE id = 3")" = -2 ]; then
	ok "redo discard of the last entry of a key: nothing to release"
else
	bad "redo discard of the last entry of a key: nothing to release"
fi
row11=$(s1sql "SELECT * FROM tb_0033 WHERE id = 11")
run -c "$S1" redo discard 12 --reason "not wanted"
if [ "$rc" -eq 0 ] && [ "$out" = "discarded R1/S1/21 (redo 12): not wanted
1 more entry of key K5 still waits in key order" ] &&
	[ "$(s1sql "SELECT group_concat(status) FROM (SELECT status FROM tb_0033
		WHERE id IN (12, 13) ORDER BY id)")" = "-2,1" ] &&
	[ "$(s1sql "SELECT * FROM tb_0033 WHERE id = 11")" = "$row11" ]; then
	ok "redo discard of a waiting entry behind a head releases nothing"
else
	bad "redo discard of a waiting entry behind a head releases nothing"
fi
run -c "$S1" redo discard 5 --reason "$reason1000"
if [ "$rc" -eq 0 ] && [ "$out" = "discarded R2/S1/2 (redo 5): $reason1000" ] &&
	[ "$(s1sql "SELECT status, length(discard_reason) FROM tb_0033 WHERE id = 5")" = "-2|1000" ]; then
	ok "redo discard with a reason of exactly 1000 bytes; no key, no release"
else
	bad "redo discard with a reason of exactly 1000 bytes; no key, no release"
fi
row6=$(s1sql "SELECT * FROM tb_0033 WHERE id = 6")
run -c "$S1" redo discard 6 --reason late
if [ "$rc" -eq 1 ] && [ -z "$out" ] &&
	[ "$err" = "semqctl: redo entry 6 (R2/S1/3) is done: it took effect; only pending, waiting or dead entries can be discarded" ] &&
	[ "$(s1sql "SELECT * FROM tb_0033 WHERE id = 6")" = "$row6" ]; then
	ok "redo discard of a done entry: exit 1, row unchanged"
else
	bad "redo discard of a done entry: exit 1, row unchanged"
fi
run -c "$S1" redo discard 1 --reason again
if [ "$rc" -eq 1 ] && [ -z "$out" ] &&
	[ "$err" = "semqctl: redo entry 1 (R1/S1/7) is already discarded (reason: bill 7 reissued as 12)" ] &&
	[ "$(s1sql "SELECT discard_reason FROM tb_0033 WHERE id = 1")" = "bill 7 reissued as 12" ]; then
	ok "redo discard of a discarded entry: exit 1 with its reason, reason kept"
else
	bad "redo discard of a discarded entry: exit 1 with its reason, reason kept"
fi
run -c "$S1" --json redo discard 7 --reason again
if [ "$rc" -eq 1 ] && pyjson '
assert d == {"id": 7, "message": "R2/S1/4", "discarded": False, "status": -2,
    "status_name": "discarded", "discard_reason": "duplicate bill"}, d'; then
	ok "redo discard --json of a discarded entry: discarded false, exit 1"
else
	bad "redo discard --json of a discarded entry: discarded false, exit 1"
fi
run -c "$S1" redo discard 99 --reason gone
if [ "$rc" -eq 1 ] && [ "$err" = "semqctl: no redo entry 99 in $dir/s1.db" ]; then
	ok "redo discard of an entry that is not there: exit 1"
else
	bad "redo discard of an entry that is not there: exit 1"
fi
run -c "$S1" redo show 1
if [ "$rc" -eq 0 ] && grep -qx 'status           -2 discarded' "$dir/out" &&
	grep -qx 'discard_reason   bill 7 reissued as 12' "$dir/out"; then
	ok "redo show after a discard shows the reason"
else
	bad "redo show after a discard shows the reason"
fi

# -- redo retry --all-dead --
before=$(nowms)
run -c "$S1" redo retry --all-dead
after=$(nowms)
if [ "$rc" -eq 0 ] && [ "$out" = "R3/S1/2 (redo 9) will be retried now
R3/S1/3 (redo 10) will be retried now
2 dead entries will be retried now" ] &&
	[ "$(err_rest)" = "semqctl: no semqd is running on $dir/s1.db to wake; they are retried when it starts" ] &&
	op_said "retried 2 dead redo entries (--all-dead)" &&
	[ "$(s1sql "SELECT group_concat(status || ':' || level || ':' ||
		(next_attempt_at BETWEEN $before AND $after)) FROM
		(SELECT * FROM tb_0033 WHERE id IN (9, 10) ORDER BY id)")" = "0:0:1,0:0:1" ] &&
	[ "$(s1sql "SELECT count(*) FROM tb_0033 WHERE status = -1")" = 0 ]; then
	ok "redo retry --all-dead: every dead entry pending now, each named"
else
	bad "redo retry --all-dead: every dead entry pending now, each named"
fi
run -c "$S1" redo retry --all-dead
if [ "$rc" -eq 0 ] && [ "$out" = "no dead redo entries; nothing to retry" ] && [ -z "$err" ]; then
	ok "redo retry --all-dead with none dead: says so, exit 0"
else
	bad "redo retry --all-dead with none dead: says so, exit 0"
fi
s1sql "UPDATE tb_0033 SET status = -1 WHERE id = 9"
start_waker
run -c "$S1" --json redo retry --all-dead
wait "$waker" || true
if [ "$rc" -eq 0 ] && [ "$(cat "$dir/woken")" = w ] && pyjson '
assert d == {"retried": [{"id": 9, "message": "R3/S1/2"}], "count": 1,
    "woke_daemon": True}, d' &&
	[ "$(s1sql "SELECT status FROM tb_0033 WHERE id = 9")" = 0 ]; then
	ok "redo retry --all-dead --json: the retried entries, wakes the daemon"
else
	bad "redo retry --all-dead --json: the retried entries, wakes the daemon"
fi
run -c "$S1" redo retry --all-dead --json
if [ "$rc" -eq 0 ] && pyjson '
assert d == {"retried": [], "count": 0, "woke_daemon": False}, d'; then
	ok "redo retry --all-dead --json with none dead"
else
	bad "redo retry --all-dead --json with none dead"
fi

# -- received list --
now=$(nowms)
s1sql "INSERT INTO tb_0030(origin, dest, seq, type, msg_key, prev_seq,
	received_at, via, result, ack_status, confirm_need, confirm_got) VALUES
	('R1', 'S1', 7, 2800, 'K1', 0, $now - 3000, NULL, 1, 0, 1, 0),
	('R2', 'S1', 1, 7, NULL, 0, $now - 120000, 'P1', 0, 0, 3, 1),
	('R1', 'S1', 8, 2800, 'K1', 7, $now - 7200000, NULL, 3, 0, 3, 0),
	('R1', 'S1', 9, 2800, 'K1', 8, $now - 1000, NULL, 4, 1, 1, 1),
	('R2', 'S1', 2, 7, NULL, 0, $now, 'P1', 0, 1, 3, 3);
	INSERT INTO semq_stream_in(origin, dest, confirmed_through)
	VALUES ('R1', 'S1', 6), ('R2', 'S1', 0)"
run -c "$S1" received list
if [ "$rc" -eq 0 ] && [ -z "$err" ] &&
	grep -Eqx 'MESSAGE +TYPE +KEY +RECEIVED +VIA +RESULT +ACK' "$dir/out" &&
	[ "$(awk 'NR > 1 && NF { print $1 }' "$dir/out" | head -5 | tr '\n' ' ')" = "R2/S1/2 R1/S1/9 R1/S1/8 R2/S1/1 R1/S1/7 " ] &&
	grep -Eqx 'R2/S1/2 +7 +- +[0-9]+s +P1 +processed +acked' "$dir/out" &&
	grep -Eqx 'R1/S1/9 +2800 +K1 +[0-9]+s +- +cancelled +acked' "$dir/out" &&
	grep -Eqx 'R1/S1/8 +2800 +K1 +2h +- +scheduled +unacked \(awaits origin\+relay\)' "$dir/out" &&
	grep -Eqx 'R2/S1/1 +7 +- +2m +P1 +processed +unacked \(awaits relay\)' "$dir/out" &&
	grep -Eqx 'R1/S1/7 +2800 +K1 +[0-9]+s +- +redo +unacked \(awaits origin\)' "$dir/out" &&
	[ "$(tail -3 "$dir/out")" = "
stream R1/S1: confirmed_through 6 (rows at or below it are kept for receipt_retention)
stream R2/S1: confirmed_through 0 (rows at or below it are kept for receipt_retention)" ]; then
	ok "received list: newest first, every result and ack, a watermark line per stream"
else
	bad "received list: newest first, every result and ack, a watermark line per stream"
fi
run -c "$S1" received list --origin R2
if [ "$rc" -eq 0 ] &&
	[ "$(awk 'NR > 1 && NF { print $1 }' "$dir/out" | tr '\n' ' ')" = "R2/S1/2 R2/S1/1 stream " ] &&
	[ "$(tail -1 "$dir/out")" = "stream R2/S1: confirmed_through 0 (rows at or below it are kept for receipt_retention)" ]; then
	ok "received list --origin R2: its rows and its stream only"
else
	bad "received list --origin R2: its rows and its stream only"
fi
run -c "$S1" received list --limit 2
if [ "$rc" -eq 0 ] &&
	[ "$(awk 'NR > 1 && NF { print $1 }' "$dir/out" | tr '\n' ' ')" = "R2/S1/2 R1/S1/9 stream stream " ]; then
	ok "received list --limit 2: the newest two"
else
	bad "received list --limit 2: the newest two"
fi
run -c "$S1" received list --origin R9
if [ "$rc" -eq 0 ] && [ "$out" = "no received messages" ]; then
	ok "received list --origin with no rows and no stream"
else
	bad "received list --origin with no rows and no stream"
fi
run -c "$S1" received list --json
if [ "$rc" -eq 0 ] && pyjson "
cols = {'message', 'origin', 'dest', 'seq', 'life', 'rowid', 'type', 'key',
    'prev_seq', 'received_at', 'via', 'result', 'result_name', 'ack_status',
    'ack_name', 'confirm_need', 'confirm_got'}
rows = d['received']
assert set(d) == {'received', 'streams_in'}, d
assert [x['message'] for x in rows] == ['R2/S1/2', 'R1/S1/9', 'R1/S1/8',
    'R2/S1/1', 'R1/S1/7'], rows
assert all(set(x) == cols for x in rows), [set(x) ^ cols for x in rows]
r = {x['message']: x for x in rows}
x = r['R2/S1/1']
assert (x['origin'], x['dest'], x['seq'], x['type'], x['key'], x['via'],
    x['result'], x['result_name'], x['ack_status'], x['ack_name'],
    x['confirm_need'], x['confirm_got'], x['received_at']) == ('R2', 'S1', 1,
    7, None, 'P1', 0, 'processed', 0, 'unacked', 3, 1, $now - 120000), x
x = r['R1/S1/8']
assert (x['key'], x['prev_seq'], x['via'], x['result_name']) == ('K1', 7,
    None, 'scheduled'), x
assert r['R1/S1/9']['result_name'] == 'cancelled' and r['R1/S1/9']['ack_name'] == 'acked'
assert r['R1/S1/7']['result_name'] == 'redo'
assert d['streams_in'] == [{'origin': 'R1', 'dest': 'S1',
    'life': '0000000000000001', 'confirmed_through': 6},
    {'origin': 'R2', 'dest': 'S1', 'life': '0000000000000001',
    'confirmed_through': 0}], d"; then
	ok "received list --json: every column and the streams' watermarks"
else
	bad "received list --json: every column and the streams' watermarks"
fi
run -c "$S1" --json received list --origin R1 --limit 1
if [ "$rc" -eq 0 ] && pyjson '
assert [x["message"] for x in d["received"]] == ["R1/S1/9"], d
assert d["streams_in"] == [{"origin": "R1", "dest": "S1",
    "life": "0000000000000001", "confirmed_through": 6}], d'; then
	ok "received list --json --origin R1 --limit 1"
else
	bad "received list --json --origin R1 --limit 1"
fi
V="received list"
expect_usage_of "$V" "received list --origin 'bad id'" \
	"received list: --origin 'bad id' is not a node id" \
	-c "$S1" received list --origin 'bad id'
expect_usage_of "$V" "received list --origin ''" "--origin '' is not a node id" \
	-c "$S1" received list --origin ''
expect_usage_of "$V" "received list --limit 100001" "--limit '100001' is not a number 1..100000" \
	-c "$S1" received list --limit 100001
expect_usage_of "$V" "received list takes no argument" "unexpected argument 'R1'" \
	-c "$S1" received list R1
expect_usage_of "$V" "received list unknown option" "unknown option '--status'" \
	-c "$S1" received list --status 0

# -- runtime and configuration failures --
for args in "redo list" "redo show 1" "redo retry 1" "redo retry --all-dead" \
	"redo discard 1 --reason r" "received list"; do
	# shellcheck disable=SC2086
	run -c "$dir/garbage.ini" $args
	if [ "$rc" -eq 1 ] && [ -z "$out" ] && [ "$(wc -l <"$dir/err")" -eq 1 ] &&
		[[ "$err" == semqctl:*garbage.db* ]]; then
		ok "$args on a database that cannot be opened: exit 1, one line"
	else
		bad "$args on a database that cannot be opened: exit 1, one line"
	fi
	# shellcheck disable=SC2086
	run -c "$dir/bad.ini" $args
	if [ "$rc" -eq 2 ] && [[ "$err" == *bad.ini:3:* ]]; then
		ok "$args with a bad configuration: exit 2 naming bad.ini:3"
	else
		bad "$args with a bad configuration: exit 2 naming bad.ini:3"
	fi
done

cli_end
