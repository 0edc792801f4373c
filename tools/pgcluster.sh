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
#   tools/pgcluster.sh stop DIR           stops the cluster and removes DIR
#
# The URL reaches the server only through its host= parameter (the socket
# directory); libpq and psql take it as it is printed. DIR is made absolute;
# it must not exist yet, or be empty. Exit codes: 0 ok, 1 failure (with a
# message naming what failed), 2 usage error.
set -euo pipefail
umask 077

prog=tools/pgcluster.sh
MARK=.semq-pgcluster

usage() {
	sed -n '3,23p' "$0" | sed 's/^# \{0,1\}//'
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

is_ours() { # DIR
	[ -f "$1/$MARK" ] && [ -d "$1/data" ]
}

cmd_start() { # DIR
	local dir tries port log me owner
	dir=$(absdir "$1")
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
	log=$dir/server.log
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
	me=$(id -un)
	as_owner sh -c "cat >'$dir/data/pg_hba.conf'" <<-EOF
		# TYPE  DATABASE  USER  METHOD
		local   all       all   peer map=semq
	EOF
	as_owner sh -c "cat >'$dir/data/pg_ident.conf'" <<-EOF
		# MAPNAME  SYSTEM-USERNAME  PG-USERNAME
		semq       $me              semq
		semq       $me              postgres
		semq       $owner           postgres
	EOF
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
			break
		fi
		if [ "$tries" = 5 ] || ! grep -q "could not bind\|Address already in use" "$log" 2>/dev/null; then
			tail -n 20 "$log" >&2 2>/dev/null || true
			cmd_stop_quiet "$dir" || true
			die "the PostgreSQL server in $dir did not start (server log above)"
		fi
	done
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
	local dir=$1 pid=""
	[ -f "$dir/$MARK" ] || return 0
	if [ -f "$dir/data/postmaster.pid" ]; then
		pid=$(head -n 1 "$dir/data/postmaster.pid" 2>/dev/null || true)
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

[ $# -ge 1 ] || usage_err "missing command: start, createdb or stop"
case "$1" in
-h | --help)
	usage
	exit 0
	;;
start | stop)
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
*)
	usage_err "unknown command '$1'"
	;;
esac
