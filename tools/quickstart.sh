#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# SEMQ quickstart: a shop (R1), a platform (P1) and a server (S1) on loopback,
# each a real semqd with its own SQLite database and TLS certificate. The
# shop sends bill documents through the platform; the server imports them
# with the bill plugin. It shows that every bill is imported exactly once —
# also when the server is killed -9 in the middle — and that a malformed
# bill lands dead in the redo queue with its reason.
#
#   tools/quickstart.sh          build, start the nodes, run the demo
#   tools/quickstart.sh --stop   stop the demo's nodes
#
# The nodes keep running after the demo so you can look around; the last
# lines say how. Run it again at any time: it starts afresh.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
demo=${SEMQ_DEMO_DIR:-$root/demo}
# SEMQ_BUILD_DIR: use that (already built) tree instead; the test suite does.
build=${SEMQ_BUILD_DIR:-$root/build/default}
ids=(P1 S1 R1)

say() { printf '\n==> %s\n' "$*"; }
die() { printf 'quickstart: %s\n' "$*" >&2; exit 1; }

stop_nodes() {
	local id pid n
	for id in R1 S1 P1; do
		[ -f "$demo/$id/semqd.pid" ] || continue
		pid=$(cat "$demo/$id/semqd.pid")
		if kill -0 "$pid" 2>/dev/null; then
			kill "$pid" 2>/dev/null || true
			for n in $(seq 50); do
				kill -0 "$pid" 2>/dev/null || break
				sleep 0.1
			done
			kill -9 "$pid" 2>/dev/null || true
		fi
		rm -f "$demo/$id/semqd.pid"
	done
}

case "${1:-}" in
--stop) stop_nodes; echo "quickstart: nodes stopped"; exit 0 ;;
"") ;;
-h | --help) sed -n '3,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
*) echo "quickstart: unknown argument '$1' (try --help)" >&2; exit 2 ;;
esac

say "1/7 installing what is missing and building (this takes a minute the first time)"
. tools/deps.sh
semq_install_deps
if [ -z "${SEMQ_BUILD_DIR:-}" ]; then
	mkdir -p "$(dirname "$build")"
	cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$build.configure.log" 2>&1 ||
		{ cat "$build.configure.log"; die "cmake configure failed"; }
	cmake --build "$build" -j "$(nproc)" --target semqd semqctl bill journal >"$build.build.log" 2>&1 ||
		{ tail -40 "$build.build.log"; die "build failed (full log: $build.build.log)"; }
fi
[ -x "$build/semqd" ] || die "no semqd in $build"
semqd=$build/semqd
semqctl=$build/semqctl
echo "built $semqd and $semqctl"

say "2/7 a fresh demo in $demo, with a CA and a certificate per node"
stop_nodes
rm -rf "$demo"
mkdir -p "$demo"
tools/mkcerts.sh "$demo/certs" "${ids[@]}" | sed 's/^/    /'

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
p1_port=$(free_port)
declare -A admin_port
for id in "${ids[@]}"; do admin_port[$id]=$(free_port); done

node_ini() { # ID EXTRA-NODE-KEYS PEERS-AND-PLUGINS
	mkdir -p "$demo/$1"
	cat >"$demo/$1/node.ini" <<EOF
; $1 of the SEMQ quickstart
[node]
id = $1
db = $1.db
admin = 127.0.0.1:${admin_port[$1]}
poll_interval = 20ms
query_after = 3s
reconnect_min = 200ms
reconnect_max = 2s
$2

[tls]
cert = ../certs/$1.crt
key = ../certs/$1.key
ca = ../certs/ca.crt
$3
EOF
}
node_ini P1 "listen = 127.0.0.1:$p1_port
relay = yes
store_and_forward = yes" "
[peer R1]
[peer S1]"
node_ini S1 "" "
[peer P1]
connect = 127.0.0.1:$p1_port
trusted_relay = yes

[plugin bill]
path = $build/plugins/bill.so
types = 2800

[redo]
levels = 2s,5s,30s
max_tries = 3"
node_ini R1 "" "
[peer P1]
connect = 127.0.0.1:$p1_port
trusted_relay = yes

[route]
default = P1"

start_node() {
	local id=$1
	(cd "$demo/$id" && exec "$semqd" -c node.ini >>semqd.log 2>&1) &
	echo $! >"$demo/$id/semqd.pid"
}
wait_for() { # SECONDS WHAT COMMAND...
	local limit=$1 what=$2 t=0
	shift 2
	until "$@" >/dev/null 2>&1; do
		sleep 0.2
		t=$((t + 1))
		[ $t -lt $((limit * 5)) ] || die "timed out after ${limit}s waiting for $what (logs: $demo/*/semqd.log)"
	done
}
ready() { grep -q "peer=$2 ready" "$demo/$1/semqd.log"; }

say "3/7 starting the platform P1 (relay, store-and-forward), the server S1 and the shop R1"
for id in "${ids[@]}"; do
	start_node "$id"
	echo "    $id: pid $(cat "$demo/$id/semqd.pid"), log $demo/$id/semqd.log"
done
wait_for 20 "R1 and S1 to connect to P1" ready P1 R1
wait_for 20 "S1 to connect to P1" ready P1 S1

ctl() { (cd "$demo/$1" && "$semqctl" -c node.ini "${@:2}"); }
bill() { # NO LINES...
	local no=$1 lines=""
	shift
	lines=$(printf '%s,' "$@")
	printf '{"bill_no":"%s","shop":"R1","currency":"EUR","lines":[%s]}' "$no" "${lines%,}"
}

say "4/7 the shop sends 5 bills and 1 malformed document (type 2800)"
for i in 1 2 3 4 5; do
	bill "B-$i" "{\"item\":\"SKU-$i\",\"qty\":$i,\"price\":\"2.50\"}" "{\"item\":\"BAG\",\"qty\":1,\"price\":\"0.10\"}" |
		ctl R1 send --to S1 --type 2800 --key "B-$i" - | sed 's/^/    /'
done
printf '{"bill_no":"B-BAD","shop":"R1","lines":[{"item":"SKU-9","qty":-1,"price":"x"}]}' |
	ctl R1 send --to S1 --type 2800 --key B-BAD - | sed 's/^/    /'

all_confirmed() { # N: R1 has N rows, all confirmed (100)
	[ "$(sqlite3 "$demo/R1/R1.db" "SELECT count(*) FROM tb_0031 WHERE status = 100")" = "$1" ]
}
wait_for 30 "the 6 documents to be confirmed" all_confirmed 6
echo "    all 6 confirmed by S1 (R1: semqctl outbound list)"
ctl R1 outbound list | sed 's/^/    /'

say "5/7 200 more bills, while the server S1 is killed -9 twice and restarted"
# As an application would: one INSERT per bill, each its own transaction, on
# the node's database, with a busy timeout (the daemon writes too) and a
# retry when SQLite still answers "locked" (as a WAL reader can, at once).
insert_bill() { # N
	local sql try
	sql="INSERT INTO tb_0031(dest, type, msg_key, payload) VALUES ('S1', 2800, 'B-$1', '$(bill "B-$1" "{\"item\":\"SKU-$1\",\"qty\":1,\"price\":\"1.00\"}")');"
	for try in 1 2 3 4 5; do
		sqlite3 -cmd ".timeout 10000" "$demo/R1/R1.db" "$sql" 2>/dev/null && return 0
		sleep 0.2
	done
	echo "quickstart: could not insert bill B-$1" >&2
	return 1
}
{
	for i in $(seq 100 299); do
		insert_bill "$i" || exit 1
	done
} &
inserter=$!
for k in 1 2; do
	sleep 0.7
	kill -9 "$(cat "$demo/S1/semqd.pid")"
	wait "$(cat "$demo/S1/semqd.pid")" 2>/dev/null || true
	echo "    killed S1 (kill -9)"
	sleep 0.5
	start_node S1
	echo "    restarted S1"
done
wait "$inserter" || die "the application could not insert its bills (see above)"
wait_for 60 "the 206 documents to be confirmed" all_confirmed 206
bills=$(sqlite3 "$demo/S1/S1.db" "SELECT count(*) FROM bill")
distinct=$(sqlite3 "$demo/S1/S1.db" "SELECT count(DISTINCT bill_no) FROM bill")
echo "    S1 imported $bills bills, $distinct distinct bill numbers"
[ "$bills" = 205 ] && [ "$distinct" = 205 ] ||
	die "expected 205 bills imported exactly once, found $bills ($distinct distinct)"

say "6/7 exactly once: every good bill imported once; the malformed one is dead, with its reason"
sqlite3 -header -column "$demo/S1/S1.db" \
	"SELECT bill_no, shop, total_minor AS total_cents, origin || '/' || dest || '/' || seq AS message
	   FROM bill ORDER BY id LIMIT 5" | sed 's/^/    /'
echo "    ... ($bills rows in all)"
ctl S1 redo list --status dead | sed 's/^/    /'
dead=$(sqlite3 "$demo/S1/S1.db" "SELECT count(*) FROM tb_0033 WHERE status = -1")
[ "$dead" = 1 ] || die "expected the malformed bill dead in S1's redo queue, found $dead dead entries"

health=$(python3 -c 'import sys,urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' \
	"http://127.0.0.1:${admin_port[S1]}/health") || die "S1's admin endpoint does not answer"
echo "    S1 /health: $health"

say "7/7 the queues of every node"
for id in "${ids[@]}"; do
	echo "    -- $id"
	ctl "$id" status | sed 's/^/    /'
done

cat <<EOF

SEMQ quickstart: done. The three nodes are still running.

Dashboards (peers, streams, the redo queue with retry and discard):
  S1  http://127.0.0.1:${admin_port[S1]}/
  P1  http://127.0.0.1:${admin_port[P1]}/
  R1  http://127.0.0.1:${admin_port[R1]}/
Metrics: http://127.0.0.1:${admin_port[S1]}/metrics (Prometheus text)

Look further:
  cd $demo/S1 && $semqctl -c node.ini redo list          # the redo queue
  cd $demo/S1 && $semqctl -c node.ini redo show ID       # why it failed, and the document
  cd $demo/S1 && $semqctl -c node.ini redo discard ID --reason "bad document"
  cd $demo/R1 && $semqctl -c node.ini send --to S1 --type 2800 --key B-7 --file bill.json
  cd $demo/R1 && $semqctl -c node.ini status --json
  cd $demo/P1 && $semqctl -c node.ini peers
  tail -f $demo/*/semqd.log

Stop the nodes:  tools/quickstart.sh --stop
EOF
