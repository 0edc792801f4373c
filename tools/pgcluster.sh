#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A throw-away PostgreSQL cluster for the tests: initdb into DIR, a server
# listening only on its unix socket in DIR (no TCP; PORT names the socket,
# .s.PGSQL.PORT), a role and a database `semq`. Peer authentication: only the
# system user who started the cluster may connect, as `semq` or as the
# superuser `postgres` (pg_ident.conf maps it); nobody else, and nothing over
# the network. fsync on (the tests check durability). Runs the server as the
# `postgres` system user when started by root (initdb refuses root). Files
# are made with umask 077.
#
#   tools/pgcluster.sh start DIR          creates DIR, starts the cluster and
#                                         prints its URL, one line:
#                                         postgresql://semq@localhost:PORT/semq?host=DIR
#   tools/pgcluster.sh createdb DIR NAME  creates an empty database NAME owned
#                                         by semq and prints its URL
#   tools/pgcluster.sh standby DIR PRIMARY_DIR
#                                         creates DIR, a streaming standby of
#                                         the cluster in PRIMARY_DIR (one per
#                                         primary): pg_basebackup over the
#                                         primary's socket with a replication
#                                         slot, standby.signal, primary_conninfo;
#                                         starts it, waits until it streams,
#                                         then makes it the primary's
#                                         synchronous standby
#                                         (synchronous_standby_names, with
#                                         synchronous_commit = on: a commit is
#                                         acknowledged once the standby has
#                                         flushed it); prints the standby's URL
#   tools/pgcluster.sh promote DIR        the standby in DIR becomes a primary
#                                         (returns once it accepts writes)
#   tools/pgcluster.sh kill DIR           kill -9 of the server in DIR: the
#                                         postmaster and all its processes at
#                                         once, as when the machine dies (for
#                                         tests; DIR stays, `stop` removes it)
#   tools/pgcluster.sh pause DIR          SIGSTOP of every process of the server
#                                         in DIR (for tests: a standby that
#                                         falls behind); resume DIR: SIGCONT
#   tools/pgcluster.sh url DIR [DIR...]   a URL of database semq that reaches
#                                         whichever of these clusters accepts
#                                         writes, one line:
#                                         postgresql://semq@/semq?host=D1,D2&port=P1,P2&target_session_attrs=read-write
#   tools/pgcluster.sh stop DIR           stops the cluster and removes DIR
#
# The URL reaches the server only through its host= parameter (the socket
# directory); libpq and psql take it as it is printed. DIR is made absolute;
# for start and standby it must not exist yet, or be empty. Replication
# connections (the standby's) use peer authentication over the socket too,
# as the superuser postgres. Exit codes: 0 ok, 1 failure (with a message
# naming what failed), 2 usage error.
set -euo pipefail
umask 077

prog=tools/pgcluster.sh
MARK=.semq-pgcluster

usage() { # the comment at the top, from its third line
	sed -n '3,/^[^#]/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
}

die() { # MESSAGE
	echo "$prog: $*" >&2
	exit 1
}

usage_err() { # MESSAGE
	echo "$prog: $* (try --help)" >&2
	exit 2
}

# The directory of initdb/pg_ctl/postgres: $SEMQ_PG_BINDIR, else the newest
# /usr/lib/postgresql/*/bin (Debian keeps them off PATH), else PATH.
find_bindir() {
	local d
	if [ -n "${SEMQ_PG_BINDIR:-}" ]; then
		[ -x "$SEMQ_PG_BINDIR/initdb" ] ||
			die "initdb not found in SEMQ_PG_BINDIR=$SEMQ_PG_BINDIR"
		echo "$SEMQ_PG_BINDIR"
		return
	fi
	d=$(shopt -s nullglob
		printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
	if [ -n "$d" ] && [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then
		echo "$d"
		return
	fi
	if command -v initdb >/dev/null && command -v pg_ctl >/dev/null; then
		dirname "$(command -v initdb)"
		return
	fi
	die "initdb not found (looked in /usr/lib/postgresql/*/bin and PATH): apt-get install postgresql"
}

find_psql() {
	if [ -x "$bindir/psql" ]; then
		echo "$bindir/psql"
	elif command -v psql >/dev/null; then
		command -v psql
	else
		die "psql not found: apt-get install postgresql-client"
	fi
}

# Runs a command as the cluster's owner: `postgres` when we are root.
as_owner() {
	if [ "$(id -u)" -eq 0 ]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

# A port nobody listens on at 127.0.0.1 (the kernel's choice when python3 is
# there, else a random one that refuses connections). The server does not
# listen on it; it names the socket, and a URL used without its host= then
# meets a refused connection rather than another server.
free_port() {
	local p
	if command -v python3 >/dev/null; then
		p=$(python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])' 2>/dev/null) && { echo "$p"; return; }
	fi
	while :; do
		p=$((20000 + RANDOM % 30000))
		(exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
	done
}

# Percent-encodes a path for the URL's host= parameter.
urlencode() {
	local s=$1 out="" c i
	for ((i = 0; i < ${#s}; i++)); do
		c=${s:i:1}
		case "$c" in
		[A-Za-z0-9/._~-]) out+=$c ;;
		*) out+=$(printf '%%%02X' "'$c") ;;
		esac
	done
	echo "$out"
}

url_of() { # DIR DBNAME
	echo "postgresql://semq@localhost:$(cat "$1/port")/$2?host=$(urlencode "$1")"
}

# DIR made absolute (it may not exist yet).
absdir() {
	case "$1" in
	/*) echo "$1" ;;
	*) echo "$(pwd)/$1" ;;
	esac
}

# Runs SQL as the superuser over the socket of the cluster in DIR.
psql_super() { # DIR DB SQL
	"$psql" -X -q -v ON_ERROR_STOP=1 -h "$1" -p "$(cat "$1/port")" \
		-U postgres -d "$2" -c "$3" >/dev/null
}

# Prints the one value SQL returns, run as the superuser in database
# postgres of the cluster in DIR.
psql_value() { # DIR SQL
	"$psql" -X -q -A -t -v ON_ERROR_STOP=1 -h "$1" -p "$(cat "$1/port")" \
		-U postgres -d postgres -c "$2"
}

is_running() { # DIR
	as_owner "$bindir/pg_ctl" -D "$1/data" status >/dev/null 2>&1
}

# Waits up to SECONDS for SQL (run on the cluster in DIR) to print WANT.
wait_value() { # DIR SQL WANT SECONDS
	local i v=""
	for i in $(seq 1 $(($4 * 10))); do
		v=$(psql_value "$1" "$2" 2>/dev/null) || v=""
		[ "$v" = "$3" ] && return 0
		sleep 0.1
	done
	return 1
}

is_ours() { # DIR
	[ -f "$1/$MARK" ] && [ -d "$1/data" ]
}

# Checks DIR (absolute; it must not exist or be empty), creates it with
# the mark, and hands it to the server's owner.
new_dir() { # DIR
	local dir=$1
	if [ -e "$dir" ]; then
		[ -d "$dir" ] || die "$dir exists and is not a directory"
		[ -z "$(ls -A "$dir")" ] || die "$dir exists and is not empty (stop the cluster there first)"
	fi
	if [ "$(id -u)" -eq 0 ]; then
		id postgres >/dev/null 2>&1 ||
			die "no 'postgres' system user to run the server as: apt-get install postgresql"
		command -v runuser >/dev/null || die "runuser not found: apt-get install util-linux"
	fi
	# It goes into postgresql.conf and the URL as it is.
	[[ "$dir" =~ ^[A-Za-z0-9/._+-]+$ ]] ||
		die "$dir: use a directory whose path has only A-Za-z0-9/._+-"
	# The socket path must fit in sun_path (107 bytes).
	[ ${#dir} -le 90 ] || die "$dir: too long for a unix socket directory (at most 90 characters)"
	mkdir -p "$dir"
	: >"$dir/$MARK"
	if [ "$(id -u)" -eq 0 ]; then
		chown postgres: "$dir"
		if ! runuser -u postgres -- test -w "$dir"; then
			cmd_stop_quiet "$dir" || true
			die "$dir: not writable by the postgres user (is a parent directory closed to others?)"
		fi
	fi
}

# Starts the server of DIR/data on its socket in DIR, on a free port (tried
# again with another when the first is taken); the settings go at the end
# of postgresql.conf, after whatever was there (a standby's copy of its
# primary's). Removes DIR and fails when it does not start.
start_server() { # DIR
	local dir=$1 tries port log=$1/server.log
	for tries in 1 2 3 4 5; do
		port=$(free_port)
		echo "$port" >"$dir/port"
		as_owner sh -c "cat >>'$dir/data/postgresql.conf'" <<-EOF

			# tools/pgcluster.sh (attempt $tries)
			listen_addresses = ''
			port = $port
			unix_socket_directories = '$dir'
			unix_socket_permissions = 0700
			max_connections = 100
			shared_buffers = 16MB
			fsync = on
			synchronous_commit = on
			full_page_writes = on
			logging_collector = off
			log_min_messages = warning
		EOF
		if as_owner "$bindir/pg_ctl" -D "$dir/data" -l "$log" -w -t 60 \
			start >/dev/null 2>&1; then
			return 0
		fi
		if [ "$tries" = 5 ] || ! grep -q "could not bind\|Address already in use" "$log" 2>/dev/null; then
			tail -n 20 "$log" >&2 2>/dev/null || true
			cmd_stop_quiet "$dir" || true
			die "the PostgreSQL server in $dir did not start (server log above)"
		fi
	done
}

cmd_start() { # DIR
	local dir me owner
	dir=$(absdir "$1")
	new_dir "$dir"
	owner=$(as_owner id -un)
	as_owner "$bindir/initdb" -D "$dir/data" -U postgres --encoding=UTF8 \
		--no-locale --auth-local=peer --auth-host=reject --no-sync \
		>"$dir/initdb.log" 2>&1 ||
		{
			cat "$dir/initdb.log" >&2
			cmd_stop_quiet "$dir" || true
			die "initdb failed in $dir/data (log above)"
		}
	# The socket only, for the user who started the cluster (and the
	# server's owner), as semq or postgres; TCP is not even listened on.
	# Replication connections (a standby's, as postgres) likewise: a
	# standby made by `standby` copies these files.
	me=$(id -un)
	as_owner sh -c "cat >'$dir/data/pg_hba.conf'" <<-EOF
		# TYPE  DATABASE     USER  METHOD
		local   all          all   peer map=semq
		local   replication  all   peer map=semq
	EOF
	as_owner sh -c "cat >'$dir/data/pg_ident.conf'" <<-EOF
		# MAPNAME  SYSTEM-USERNAME  PG-USERNAME
		semq       $me              semq
		semq       $me              postgres
		semq       $owner           postgres
	EOF
	start_server "$dir"
	if ! psql_super "$dir" postgres "CREATE ROLE semq LOGIN CREATEDB" ||
		! psql_super "$dir" postgres "CREATE DATABASE semq OWNER semq"; then
		cmd_stop_quiet "$dir" || true
		die "creating the role and database semq in $dir failed"
	fi
	url_of "$dir" semq
}

cmd_createdb() { # DIR NAME
	local dir name=$2
	dir=$(absdir "$1")
	is_ours "$dir" || die "$dir: no cluster of $prog there"
	[[ "$name" =~ ^[a-z_][a-z0-9_]{0,62}$ ]] ||
		usage_err "database name '$name': use 1-63 of a-z, 0-9 and _, not starting with a digit"
	as_owner "$bindir/pg_ctl" -D "$dir/data" status >/dev/null 2>&1 ||
		die "$dir: the cluster is not running"
	psql_super "$dir" postgres "CREATE DATABASE $name OWNER semq" ||
		die "$dir: creating database $name failed"
	url_of "$dir" "$name"
}

# The replication slot and application name of the standby in DIR:
# standby_ and DIR's last component in a-z0-9_ (at most 63 characters).
standby_name() { # DIR
	local n
	n=$(basename "$1")
	n=${n,,}
	n=standby_${n//[^a-z0-9_]/_}
	echo "${n:0:63}"
}

cmd_standby() { # DIR PRIMARY_DIR
	local dir pdir name pport
	dir=$(absdir "$1")
	pdir=$(absdir "$2")
	[ "$dir" != "$pdir" ] || usage_err "standby: DIR and PRIMARY_DIR are the same directory"
	is_ours "$pdir" || die "$pdir: no cluster of $prog there"
	is_running "$pdir" || die "$pdir: the cluster is not running"
	[ "$(psql_value "$pdir" "SELECT pg_is_in_recovery()")" = f ] ||
		die "$pdir: is a standby itself, not a primary"
	[ ! -s "$pdir/standby" ] ||
		die "$pdir: already has a standby ($(cat "$pdir/standby")); $prog makes one per primary"
	name=$(standby_name "$dir")
	pport=$(cat "$pdir/port")
	new_dir "$dir"
	# The copy, with the WAL written meanwhile, through a slot that keeps
	# the primary's WAL until the standby has it.
	if ! as_owner "$bindir/pg_basebackup" -h "$pdir" -p "$pport" -U postgres \
		-D "$dir/data" -X stream -c fast -C -S "$name" -w \
		>"$dir/basebackup.log" 2>&1; then
		cat "$dir/basebackup.log" >&2
		psql_super "$pdir" postgres "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = '$name'" || true
		cmd_stop_quiet "$dir" || true
		die "pg_basebackup from $pdir failed (log above)"
	fi
	# A standby of pdir through the slot; never waiting for a standby of
	# its own once promoted (the copy may carry the primary's setting).
	as_owner sh -c "cat >>'$dir/data/postgresql.auto.conf'" <<-EOF
		# tools/pgcluster.sh standby of $pdir
		primary_conninfo = 'host=$pdir port=$pport user=postgres application_name=$name'
		primary_slot_name = '$name'
		synchronous_standby_names = ''
	EOF
	as_owner touch "$dir/data/standby.signal"
	echo "$pdir" >"$dir/primary"
	start_server "$dir"
	if ! wait_value "$pdir" "SELECT count(*) FROM pg_stat_replication WHERE application_name = '$name' AND state = 'streaming'" 1 60; then
		tail -n 20 "$dir/server.log" >&2 2>/dev/null || true
		cmd_stop_quiet "$dir" || true
		die "the standby in $dir does not stream from $pdir within 60 s (its log above)"
	fi
	# From now on a commit on the primary returns once the standby has
	# flushed its WAL (synchronous_commit = on, set by start_server).
	echo "$name" >"$pdir/standby"
	if ! psql_super "$pdir" postgres "ALTER SYSTEM SET synchronous_standby_names = '$name'" ||
		! psql_super "$pdir" postgres "SELECT pg_reload_conf()" ||
		! wait_value "$pdir" "SELECT sync_state FROM pg_stat_replication WHERE application_name = '$name'" sync 30; then
		die "$pdir: could not make $dir its synchronous standby"
	fi
	url_of "$dir" semq
}

cmd_promote() { # DIR
	local dir
	dir=$(absdir "$1")
	is_ours "$dir" || die "$dir: no cluster of $prog there"
	is_running "$dir" || die "$dir: the cluster is not running"
	[ -f "$dir/data/standby.signal" ] || die "$dir: not a standby"
	as_owner "$bindir/pg_ctl" -D "$dir/data" -w -t 60 promote \
		>"$dir/promote.log" 2>&1 || {
		cat "$dir/promote.log" >&2
		die "$dir: pg_ctl promote failed (its messages above)"
	}
	wait_value "$dir" "SELECT pg_is_in_recovery()" f 60 ||
		die "$dir: still in recovery 60 s after promote"
}

# The processes whose parent is PID.
children_of() { # PID
	local f st
	for f in /proc/[0-9]*/stat; do
		st=$(cat "$f" 2>/dev/null) || continue
		st=${st##*) }
		st=${st#* }
		[ "${st%% *}" = "$1" ] || continue
		f=${f#/proc/}
		echo "${f%/stat}"
	done
}

cmd_kill() { # DIR
	local dir pid kids p
	dir=$(absdir "$1")
	is_ours "$dir" || die "$dir: no cluster of $prog there"
	pid=$(head -n 1 "$dir/data/postmaster.pid" 2>/dev/null) || pid=""
	pg_alive "$pid" || die "$dir: the server is not running"
	# Frozen first, so that nothing of it acts (forks, answers, sends WAL)
	# between the first kill and the last.
	kill -STOP "$pid" 2>/dev/null || die "$dir: cannot signal the postmaster $pid"
	kids=$(children_of "$pid")
	for p in $kids; do kill -STOP "$p" 2>/dev/null || true; done
	kill -KILL "$pid" 2>/dev/null || true
	for p in $kids; do kill -KILL "$p" 2>/dev/null || true; done
	for p in $pid $kids; do
		pg_wait_gone "$p" || die "$dir: process $p still there after kill -9"
	done
	# Its pid may be another process's soon: `stop` must not signal that.
	as_owner rm -f "$dir/data/postmaster.pid"
}

# Sends SIG to the postmaster of DIR and every process of it.
signal_server() { # DIR SIG
	local dir pid p
	dir=$(absdir "$1")
	is_ours "$dir" || die "$dir: no cluster of $prog there"
	pid=$(head -n 1 "$dir/data/postmaster.pid" 2>/dev/null) || pid=""
	pg_alive "$pid" || die "$dir: the server is not running"
	kill -"$2" "$pid" 2>/dev/null || die "$dir: cannot signal the postmaster $pid"
	for p in $(children_of "$pid"); do kill -"$2" "$p" 2>/dev/null || true; done
}

cmd_pause() { # DIR
	signal_server "$1" STOP
}

cmd_resume() { # DIR
	signal_server "$1" CONT
}

cmd_url() { # DIR...
	local dir hosts="" ports=""
	for dir in "$@"; do
		dir=$(absdir "$dir")
		is_ours "$dir" || die "$dir: no cluster of $prog there"
		hosts+=${hosts:+,}$(urlencode "$dir")
		ports+=${ports:+,}$(cat "$dir/port")
	done
	# semq@ keeps the // of an empty host through URL tools that drop it
	# (Python's urlunsplit); libpq takes the hosts from host=.
	echo "postgresql://semq@/semq?host=$hosts&port=$ports&target_session_attrs=read-write"
}

# Is PID a live postgres process (not gone, not a zombie waiting for its
# parent)?
pg_alive() { # PID
	local st
	[[ "$1" =~ ^[0-9]+$ ]] || return 1
	st=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	st=${st##*) }
	[ "${st%% *}" != Z ] && grep -q postgres "/proc/$1/comm" 2>/dev/null
}

# Waits up to 10 s for PID to end; kills it when it does not.
pg_wait_gone() { # PID
	local i
	for i in $(seq 1 100); do
		pg_alive "$1" || return 0
		[ "$i" = 50 ] && kill -9 "$1" 2>/dev/null
		sleep 0.1
	done
	! pg_alive "$1"
}

# Stops the server (fast, then immediate, then the postmaster's pid is
# killed) and removes DIR. Never removes a directory that is not ours.
cmd_stop_quiet() { # DIR
	local dir=$1 pid="" p
	[ -f "$dir/$MARK" ] || return 0
	if [ -f "$dir/data/postmaster.pid" ]; then
		pid=$(head -n 1 "$dir/data/postmaster.pid" 2>/dev/null || true)
	fi
	# A server left paused would not hear pg_ctl.
	if pg_alive "$pid"; then
		for p in "$pid" $(children_of "$pid"); do
			kill -CONT "$p" 2>/dev/null || true
		done
	fi
	if [ -f "$dir/data/PG_VERSION" ]; then
		as_owner "$bindir/pg_ctl" -D "$dir/data" -m fast -w -t 30 stop >/dev/null 2>&1 ||
			as_owner "$bindir/pg_ctl" -D "$dir/data" -m immediate -w -t 30 stop >/dev/null 2>&1 ||
			true
	fi
	local gone=0
	if [ -z "$pid" ] || pg_wait_gone "$pid"; then
		gone=1
	fi
	rm -rf "$dir"
	[ "$gone" = 1 ] && [ ! -e "$dir" ]
}

cmd_stop() { # DIR
	local dir
	dir=$(absdir "$1")
	[ -e "$dir" ] || die "$dir: no such directory (already stopped?)"
	is_ours "$dir" || [ -f "$dir/$MARK" ] ||
		die "$dir: not a cluster of $prog (no $MARK): not removing it"
	cmd_stop_quiet "$dir" || die "$dir: the server or the directory is still there"
}

[ $# -ge 1 ] || usage_err "missing command: start, createdb, standby, promote, kill, pause, resume, url or stop"
case "$1" in
-h | --help)
	usage
	exit 0
	;;
start | stop | promote | kill | pause | resume)
	[ $# -eq 2 ] || usage_err "usage: $prog $1 DIR"
	[ -n "$2" ] || usage_err "$1: DIR is empty"
	bindir=$(find_bindir)
	psql=$(find_psql)
	"cmd_$1" "$2"
	;;
createdb)
	[ $# -eq 3 ] || usage_err "usage: $prog createdb DIR NAME"
	bindir=$(find_bindir)
	psql=$(find_psql)
	cmd_createdb "$2" "$3"
	;;
standby)
	[ $# -eq 3 ] || usage_err "usage: $prog standby DIR PRIMARY_DIR"
	[ -n "$2" ] || usage_err "standby: DIR is empty"
	[ -n "$3" ] || usage_err "standby: PRIMARY_DIR is empty"
	bindir=$(find_bindir)
	psql=$(find_psql)
	cmd_standby "$2" "$3"
	;;
url)
	[ $# -ge 2 ] || usage_err "usage: $prog url DIR [DIR...]"
	shift
	for d in "$@"; do
		[ -n "$d" ] || usage_err "url: a DIR is empty"
	done
	cmd_url "$@"
	;;
*)
	usage_err "unknown command '$1'"
	;;
esac
