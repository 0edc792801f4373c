#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Checks the documentation and packaging against the code:
#  - docs/CONFIG.md documents exactly the sections and keys that
#    `semqd --config-reference` prints (node/config.c's key table), each with
#    the same type, range and default; and the checker itself notices a key
#    left out, a key that does not exist and a wrong default;
#  - tools/node.ini.sample, with its paths moved into a temp dir and real
#    certificates from tools/mkcerts.sh, passes `semqd --check` and
#    `semqctl status`, and every default it shows in a comment is the real
#    default (uncommented, they still pass --check);
#  - `cmake --install BUILD --prefix P` (and with DESTDIR) installs the
#    expected files, the unit names the installed semqd (and passes
#    `systemd-analyze verify` where that is installed), a plugin built from
#    the installed headers as docs/PLUGINS.md says loads, and the installed
#    semqd checks the sample with the installed plugins;
#  - the minimal example plugin applies a message end to end between two real
#    nodes on loopback, and its PERMANENT failure lands dead in tb_0033.
#
# Usage: bash test_docs.sh SEMQD SEMQCTL CMAKE BUILD_DIR
set -euo pipefail

if [ $# -ne 4 ]; then
	echo "usage: $0 SEMQD SEMQCTL CMAKE BUILD_DIR" >&2
	exit 2
fi
SEMQD=$(realpath "$1")
SEMQCTL=$(realpath "$2")
CMAKE=$3
BUILD=$(realpath "$4")
SRC=$(cd "$(dirname "$0")/../.." && pwd)

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
cli_begin test_docs # $pids: the nodes it starts, stopped on exit
free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# ---- docs/CONFIG.md against the key table ---------------------------------
# compare_ref REFERENCE CONFIG_MD: every [section] and key of the reference is
# in the doc with the same type and default, and the doc has nothing else.
cat >"$dir/compare.py" <<'EOF'
import re, sys

def reference(path):
    keys, sects, sect = {}, [], None
    for line in open(path):
        m = re.match(r"^\[(\w+)( NAME)?\]$", line)
        if m:
            sect = m.group(1)
            sects.append(sect)
            continue
        m = re.match(r"^  (\S+) = <(.*)>  \((required|optional|default (.*))\)$", line)
        if m:
            d = m.group(3) if m.group(4) is None else m.group(4)
            keys[(sect, m.group(1))] = (m.group(2), d)
    return sects, keys

def cells(row):
    out, cur, i = [], "", 0
    while i < len(row):
        if row[i] == "\\" and i + 1 < len(row) and row[i + 1] == "|":
            cur += "|"; i += 2; continue
        if row[i] == "|":
            out.append(cur.strip()); cur = ""
        else:
            cur += row[i]
        i += 1
    return out[1:]

def documented(path):
    keys, sects, sect = {}, [], None
    for line in open(path):
        m = re.match(r"^## `\[(\w+)( NAME)?\]`\s*$", line)
        if m:
            sect = m.group(1)
            sects.append(sect)
            continue
        if sect and line.startswith("| `"):
            c = cells(line.rstrip("\n"))
            key, typ, dflt = (x.strip("`") for x in c[:3])
            if (sect, key) in keys:
                print(f"CONFIG.md: [{sect}] {key} documented twice")
                sys.exit(1)
            keys[(sect, key)] = (typ, dflt)
    return sects, keys

rs, rk = reference(sys.argv[1])
ds, dk = documented(sys.argv[2])
bad = []
if not rk:
    bad.append("the reference lists no keys")
if rs != ds:
    bad.append(f"sections differ: reference {rs}, CONFIG.md {ds}")
for k, v in rk.items():
    if k not in dk:
        bad.append(f"[{k[0]}] {k[1]}: not documented in CONFIG.md")
    elif dk[k] != v:
        bad.append(f"[{k[0]}] {k[1]}: CONFIG.md says {dk[k]}, the code {v}")
for k in dk:
    if k not in rk:
        bad.append(f"[{k[0]}] {k[1]}: documented but no such key")
for b in bad:
    print(b)
sys.exit(1 if bad else 0)
EOF

rc=0
"$SEMQD" --config-reference >"$dir/reference.txt" 2>"$dir/log" || rc=$?
if [ "$rc" -eq 0 ] && grep -q '^\[node\]$' "$dir/reference.txt" &&
	grep -q '^  id = <node id>  (required)$' "$dir/reference.txt"; then
	ok "semqd --config-reference prints the key table, exit 0"
else
	bad "semqd --config-reference prints the key table, exit 0 (rc=$rc)"
fi
check "docs/CONFIG.md documents every key of the table, and only those" \
	python3 "$dir/compare.py" "$dir/reference.txt" "$SRC/docs/CONFIG.md"

# The checker must notice drift: a key left out, one invented, a wrong default.
# shellcheck disable=SC2016 # backquotes are Markdown here, not shell
grep -v '^| `window` |' "$SRC/docs/CONFIG.md" >"$dir/missing.md"
# shellcheck disable=SC2016
sed 's/^| `window` |/| `windoe` |/' "$SRC/docs/CONFIG.md" >"$dir/invented.md"
# shellcheck disable=SC2016
sed 's/^\(| `query_after` | `[^`]*` | \)`30s`/\1`31s`/' "$SRC/docs/CONFIG.md" >"$dir/default.md"
for case in "missing:a key left out:[node] window: not documented" \
	"invented:a key that does not exist:[node] windoe: documented but no such key" \
	"default:a wrong default:[node] query_after: CONFIG.md says"; do
	f=${case%%:*}
	rest=${case#*:}
	what=${rest%%:*}
	want=${rest#*:}
	rc=0
	python3 "$dir/compare.py" "$dir/reference.txt" "$dir/$f.md" >"$dir/log" 2>&1 || rc=$?
	if [ "$rc" -eq 1 ] && grep -qF "$want" "$dir/log"; then
		ok "the CONFIG.md check catches $what ($want)"
	else
		bad "the CONFIG.md check catches $what ($want)"
	fi
done

# ---- tools/node.ini.sample --------------------------------------------------
mkdir -p "$dir/s/certs" "$dir/s/state"
"$SRC/tools/mkcerts.sh" "$dir/s/certs" S1 >"$dir/log" 2>&1 || { bad "mkcerts.sh"; }
port=$(free_port)
# sample PLUGIN_DIR OUT: the sample with its paths and addresses moved here.
sample() {
	sed -e "s|/var/lib/semq|$dir/s/state|" \
		-e "s|/etc/semq/certs|$dir/s/certs|" \
		-e "s|/usr/local/lib/semq/plugins|$1|" \
		-e "s|^listen = 0.0.0.0:7100|listen = 127.0.0.1:$port|" \
		-e "s|^connect = 192.0.2.10:7100|connect = 127.0.0.1:$port|" \
		"$SRC/tools/node.ini.sample" >"$2"
}
sample "$BUILD/plugins" "$dir/s/node.ini"
if [ "$(diff "$SRC/tools/node.ini.sample" "$dir/s/node.ini" | grep -c '^>')" -ne 7 ] ||
	grep -q -e /var/lib/semq -e /etc/semq/certs -e /usr/local "$dir/s/node.ini"; then
	bad "the sample's 7 paths and addresses were all substituted"
else
	ok "the sample's 7 paths and addresses were all substituted"
fi
check "semqd --check passes on tools/node.ini.sample" \
	"$SEMQD" -c "$dir/s/node.ini" --check
check "semqctl status works on tools/node.ini.sample" \
	"$SEMQCTL" -c "$dir/s/node.ini" status

# Every ';key = value' default shown in [node], [redo] and [relay] is the real
# default.
# defaults.py REFERENCE SAMPLE OUT: checks them, and writes the sample with
# them uncommented to OUT.
cat >"$dir/defaults.py" <<'EOF'
import re, sys
ref, sect = {}, None
for line in open(sys.argv[1]):
    m = re.match(r"^\[(\w+)", line)
    if m:
        sect = m.group(1)
    m = re.match(r"^  (\S+) = <.*>  \((required|optional|default (.*))\)$", line)
    if m:
        ref[(sect, m.group(1))] = m.group(3)
out, sect, bad, seen = [], None, [], 0
for line in open(sys.argv[2]):
    m = re.match(r"^\[(\w+)", line)
    if m:
        sect = m.group(1)
    m = re.match(r"^;(\w+) =\s*(\S*)", line)
    if m and sect in ("node", "redo", "relay"):
        key, val = m.group(1), m.group(2)
        if (sect, key) not in ref:
            bad.append(f"[{sect}] {key}: no such key")
        elif val and val != ";" and key != "admin":
            seen += 1
            if ref[(sect, key)] != val:
                bad.append(f"[{sect}] {key}: sample shows {val}, default is {ref[(sect, key)]}")
            line = f"{key} = {val}\n"
    out.append(line)
open(sys.argv[3], "w").writelines(out)
if seen < 15:
    bad.append(f"only {seen} commented defaults found")
print("\n".join(bad))
sys.exit(1 if bad else 0)
EOF
check "the sample's commented defaults are the real defaults" \
	python3 "$dir/defaults.py" "$dir/reference.txt" "$dir/s/node.ini" "$dir/s/uncommented.ini"
check "the sample with its commented defaults uncommented passes semqd --check" \
	"$SEMQD" -c "$dir/s/uncommented.ini" --check

# ---- cmake --install ----------------------------------------------------------
P=$dir/x
check "cmake --install BUILD --prefix P succeeds" "$CMAKE" --install "$BUILD" --prefix "$P"
missing=()
for f in sbin/semqd bin/semqctl lib/libsemq.so.0 \
	lib/semq/plugins/journal.so lib/semq/plugins/bill.so lib/semq/plugins/export.so \
	include/semq/semq.h include/semq/plugin.h include/semq/error.h \
	share/semq/db/0001_init.sql lib/systemd/system/semqd.service \
	share/doc/semq/node.ini.sample share/doc/semq/README.md \
	share/doc/semq/ARCHITECTURE.md share/doc/semq/PROTOCOL.md \
	share/doc/semq/CONFIG.md share/doc/semq/PLUGINS.md \
	share/doc/semq/examples/minimal.c share/man/man8/semqd.8.gz \
	share/man/man8/semqctl.8.gz share/man/man5/semq.ini.5.gz \
	share/bash-completion/completions/semqctl; do
	[ -s "$P/$f" ] || missing+=("$f")
done
if [ ${#missing[@]} -eq 0 ] && [ -x "$P/sbin/semqd" ] && [ -x "$P/bin/semqctl" ] &&
	[ ! -e "$P/etc/semq/node.ini" ] &&
	grep -q "^path = $P/lib/semq/plugins/bill.so" "$P/share/doc/semq/node.ini.sample"; then
	ok "the install tree has the binaries, plugins, headers, schema, docs, sample (naming PREFIX's plugins), man pages, completion and unit"
else
	: >"$dir/log"
	bad "the install tree has the binaries, plugins, headers, schema, docs, sample (naming PREFIX's plugins), man pages, completion and unit (missing: ${missing[*]})"
fi
if grep -qx "ExecStart=$P/sbin/semqd -c /etc/semq/node.ini" "$P/lib/systemd/system/semqd.service" &&
	! grep -v '^#' "$P/lib/systemd/system/semqd.service" | grep -q /usr/local; then
	ok "the installed unit runs the installed semqd"
else
	grep ExecStart "$P/lib/systemd/system/semqd.service" >"$dir/log" 2>&1 || true
	bad "the installed unit runs the installed semqd"
fi
if command -v systemd-analyze >/dev/null; then
	check "systemd-analyze verify accepts the installed unit" \
		systemd-analyze verify "$P/lib/systemd/system/semqd.service"
else
	echo "skip - systemd-analyze verify (not installed)"
fi
check "DESTDIR=D cmake --install --prefix /usr stages under D" \
	env DESTDIR="$dir/d" "$CMAKE" --install "$BUILD" --prefix /usr
if [ -x "$dir/d/usr/sbin/semqd" ] &&
	grep -qx "ExecStart=/usr/sbin/semqd -c /etc/semq/node.ini" "$dir/d/usr/lib/systemd/system/semqd.service" &&
	[ -s "$dir/d/usr/lib/semq/plugins/bill.so" ] &&
	grep -q "^path = /usr/lib/semq/plugins/bill.so" "$dir/d/etc/semq/node.ini"; then
	ok "with DESTDIR and --prefix /usr: /usr/sbin/semqd in the unit, plugins in /usr/lib/semq/plugins as /etc/semq/node.ini names them"
else
	: >"$dir/log"
	bad "with DESTDIR and --prefix /usr: /usr/sbin/semqd in the unit, plugins in /usr/lib/semq/plugins as /etc/semq/node.ini names them"
fi

# A plugin built from the installed headers, as docs/PLUGINS.md says.
check "the minimal plugin builds against the installed headers" \
	gcc -shared -fPIC -Wall -Wextra -Werror -Wmissing-prototypes -I "$P/include" \
	-o "$dir/minimal.so" "$P/share/doc/semq/examples/minimal.c" -lsqlite3
cp "$dir/s/node.ini" "$dir/s/plugin.ini"
cat >>"$dir/s/plugin.ini" <<EOF

[plugin minimal]
path = $dir/minimal.so
types = 1
reject_empty = maybe
EOF
rc=0
"$SEMQD" -c "$dir/s/plugin.ini" --check >"$dir/log" 2>&1 || rc=$?
if [ "$rc" -eq 2 ] && grep -q "plugin.ini:[0-9]*: reject_empty 'maybe' is not yes or no" "$dir/log"; then
	ok "it loads, and refuses a bad option naming FILE:LINE (exit 2)"
else
	bad "it loads, and refuses a bad option naming FILE:LINE (exit 2, rc=$rc)"
fi
sample "$P/lib/semq/plugins" "$dir/s/installed.ini"
check "the installed semqd checks the sample with the installed bill plugin" \
	"$P/sbin/semqd" -c "$dir/s/installed.ini" --check

# ---- the minimal plugin, end to end -------------------------------------------
"$SRC/tools/mkcerts.sh" "$dir/e/certs" R1 S1 >"$dir/log" 2>&1 || bad "mkcerts.sh R1 S1"
eport=$(free_port)
cat >"$dir/e/s1.ini" <<EOF
[node]
id = S1
db = s1.db
listen = 127.0.0.1:$eport
poll_interval = 20ms
[tls]
cert = certs/S1.crt
key = certs/S1.key
ca = certs/ca.crt
[peer R1]
[plugin minimal]
path = $BUILD/plugins/minimal.so
types = *
reject_empty = yes
EOF
cat >"$dir/e/r1.ini" <<EOF
[node]
id = R1
db = r1.db
poll_interval = 20ms
reconnect_min = 100ms
reconnect_max = 1s
[tls]
cert = certs/R1.crt
key = certs/R1.key
ca = certs/ca.crt
[peer S1]
connect = 127.0.0.1:$eport
EOF
"$SEMQD" -c "$dir/e/s1.ini" >"$dir/e/s1.log" 2>&1 &
pids+=($!)
"$SEMQD" -c "$dir/e/r1.ini" >"$dir/e/r1.log" 2>&1 &
pids+=($!)
# R1's semqd may not have created its database yet: --create, as an
# application queueing before the node's first start would.
"$SEMQCTL" -c "$dir/e/r1.ini" --create send --to S1 --type 7 --key K1 --data hello >"$dir/log" 2>&1 ||
	bad "semqctl send"
"$SEMQCTL" -c "$dir/e/r1.ini" send --to S1 --type 7 --data "" >"$dir/log" 2>&1 ||
	bad "semqctl send (empty payload)"
# until SECONDS COMMAND...: polls the command every 0.1 s.
until_ok() {
	local n=$(($1 * 10))
	shift
	while [ "$n" -gt 0 ]; do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.1
		n=$((n - 1))
	done
	return 1
}
got_row() {
	[ "$(sqlite3 "$dir/e/s1.db" "SELECT origin||'/'||dest||'/'||seq||' '||type||' '||msg_key||' '||CAST(payload AS TEXT)||' '||tries FROM minimal_inbox")" = "R1/S1/1 7 K1 hello 0" ]
}
got_dead() {
	[ "$(sqlite3 "$dir/e/s1.db" "SELECT seq||' '||status||' '||last_error FROM tb_0033")" = "2 -1 minimal: R1/S1/2 has an empty payload" ]
}
confirmed() {
	[ "$(sqlite3 "$dir/e/r1.db" "SELECT group_concat(seq||':'||status||':'||result, ' ') FROM (SELECT * FROM tb_0031 ORDER BY seq)")" = "1:100:0 2:100:5" ]
}
if until_ok 60 got_row; then
	ok "the minimal plugin wrote the message into minimal_inbox at S1, once"
else
	cp "$dir/e/s1.log" "$dir/log"
	bad "the minimal plugin wrote the message into minimal_inbox at S1, once"
fi
if until_ok 30 got_dead; then
	ok "its PERMANENT failure is dead in tb_0033 with the plugin's reason"
else
	sqlite3 "$dir/e/s1.db" "SELECT * FROM tb_0033" >"$dir/log" 2>&1 || true
	bad "its PERMANENT failure is dead in tb_0033 with the plugin's reason"
fi
if until_ok 30 confirmed; then
	ok "R1 has both confirmed (100), with results processed (0) and dead (5)"
else
	sqlite3 "$dir/e/r1.db" "SELECT seq, status, result FROM tb_0031" >"$dir/log" 2>&1 || true
	bad "R1 has both confirmed (100), with results processed (0) and dead (5)"
fi
stopped=0
for p in "${pids[@]}"; do
	kill -TERM "$p"
	if wait "$p"; then stopped=$((stopped + 1)); fi
done
pids=()
if [ "$stopped" -eq 2 ]; then
	ok "both nodes stop cleanly on SIGTERM (exit 0)"
else
	cat "$dir/e/s1.log" "$dir/e/r1.log" >"$dir/log"
	bad "both nodes stop cleanly on SIGTERM (exit 0)"
fi

cli_end
