#!/usr/bin/env bash
# testpg.sh: a throwaway PostgreSQL server for the tests (internal/testkit/pgtest).
#
#   eval "$(scripts/testpg.sh start)"   start one; print the variables to export
#   scripts/testpg.sh stop [DIR]        stop it and delete its files
#   scripts/testpg.sh restart DIR [SECS] [MODE]  shut down, SECS (default 0)
#                                       with no server, start again on the same port
#   scripts/testpg.sh down DIR [MODE]   shut it down, keeping its files and port
#   scripts/testpg.sh up DIR            start a server that is down again
#   scripts/testpg.sh run CMD...        start one, run CMD with it, stop it
#
# MODE is how the server shuts down: fast (the default: SIGINT, transactions
# rolled back, connections closed, a checkpoint) or immediate (SIGQUIT: every
# backend aborted with no checkpoint, crash recovery at the next start, as
# when the machine or the server crashes).
#
# The server is a fresh cluster (initdb) in a `mktemp -d` directory, started
# directly (no systemd, no pg_ctlcluster), listening on 127.0.0.1 only, on a
# free port from 54329 upward, with its unix socket and log inside that
# directory. Authentication is trust, so the URL needs no password: anyone on
# this machine can connect to 127.0.0.1 as the superuser, which is fine for a
# throwaway cluster of test data and is why it never listens elsewhere. fsync
# stays on, as in production: the benchmarks measure real durability.
#
# `start` prints only `export` lines on stdout, and everything else on stderr:
#   export SORTIE_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:PORT/sortie_test?sslmode=disable
#   export SORTIE_TESTPG_DIR=/tmp/sortie-testpg.XXXXXX
# The postmaster's PID is recorded in $SORTIE_TESTPG_DIR/testpg.state, and
# `stop` ends the server by that PID, never by name. `restart`, `down` and
# `up` (for tests of what clients do when the server restarts or is away)
# stop it the same way and start it again on the port in that file; `start`
# never takes a port another server's state file records, even while that
# server is down.
#
# When the server binaries are missing, `start` installs the Debian package
# `postgresql` with apt-get if it may (we are root, or sudo works without a
# password); otherwise it says what to install and fails. initdb and postgres
# refuse to run as root, so as root they run as the `postgres` system user, or
# as a system user `sortie-pg` created for the purpose when there is none.
#
# `run` is what `make test` uses. With SORTIE_TEST_POSTGRES_URL already set it
# just runs CMD against that server. When no server can be started it fails
# under CI=true; elsewhere it warns loudly and runs CMD anyway, and the
# PostgreSQL tests skip (internal/testkit/pgtest).
#
# Environment:
#   SORTIE_TEST_POSTGRES_URL  a server to use instead of starting one (run)
#   SORTIE_TESTPG_DIR         the directory `stop` cleans up by default
#   SORTIE_TESTPG_BINDIR      look for initdb and postgres only in this
#                             directory, and never install; set it to a
#                             directory without them (/nonexistent) to see
#                             what happens on a machine with no server
#   SORTIE_TESTPG_INSTALL     auto (default): install when missing and allowed;
#                             no: never install; dry-run: print the install
#                             commands instead of running them (a test aid)
#   CI                        true: a server that cannot be started fails `run`
set -euo pipefail

readonly SELF="${BASH_SOURCE[0]}"
readonly FIRST_PORT=54329
readonly LAST_PORT=54429
readonly PORT_LOCK=/tmp/sortie-testpg.ports.lock  # held while a start picks its port
readonly MIN_MAJOR=15         # the oldest server pgstore supports
readonly READY_TIMEOUT=30     # seconds to wait for the server to accept connections
readonly STOP_TIMEOUT=20      # seconds between SIGINT (fast shutdown) and SIGKILL
readonly STATE_FILE=testpg.state
readonly DB_NAME=sortie_test
readonly DB_USER=postgres

# stdout is reserved for the `export` lines that callers eval, so everything
# else goes to stderr: fd 3 keeps the real stdout, and fd 1 becomes stderr,
# which catches the output of every command run below (apt-get, initdb, ...).
exec 3>&1 1>&2

readonly LOG_NAME=testpg
# shellcheck source=scripts/testserver.sh
source "$(dirname "$SELF")/testserver.sh"

usage() {
	cat <<'EOF'
usage: scripts/testpg.sh start          start a server; eval the output
       scripts/testpg.sh stop [DIR]     stop it (DIR defaults to $SORTIE_TESTPG_DIR)
       scripts/testpg.sh restart DIR [SECS] [MODE]
                                        stop it, wait SECS, start it again
       scripts/testpg.sh down DIR [MODE]
                                        stop it, keeping its files and port
       scripts/testpg.sh up DIR         start it again after down
       scripts/testpg.sh run CMD...     run CMD with a server, then stop it
MODE is fast (the default) or immediate.
EOF
	exit 2
}

# ---------------------------------------------------------------- binaries

# major_version BINDIR prints the major version of BINDIR/postgres ("15").
major_version() {
	local v
	v=$("$1/postgres" --version 2>/dev/null) || return 1
	# "postgres (PostgreSQL) 15.8 (Debian 15.8-0+deb12u1)" -> "15"
	v=${v#*) }
	printf '%s\n' "${v%%[!0-9]*}"
}

# usable_bindir DIR succeeds when DIR holds a server we can use. pg_ctl is not
# needed: the server is started directly and stopped by PID.
usable_bindir() {
	local major
	[[ -x $1/initdb && -x $1/postgres ]] || return 1
	major=$(major_version "$1") || return 1
	if [[ -z $major || $major -lt $MIN_MAJOR ]]; then
		log "ignoring PostgreSQL ${major:-of unknown version} in $1: need $MIN_MAJOR or newer"
		return 1
	fi
}

# find_bindir prints the directory holding initdb and postgres: the one in
# SORTIE_TESTPG_BINDIR if set, else the one on PATH, else the newest
# /usr/lib/postgresql/*/bin (where Debian's packages put them).
find_bindir() {
	local dir initdb
	if [[ -n ${SORTIE_TESTPG_BINDIR:-} ]]; then
		usable_bindir "$SORTIE_TESTPG_BINDIR" || return 1
		printf '%s\n' "$SORTIE_TESTPG_BINDIR"
		return 0
	fi
	if initdb=$(command -v initdb 2>/dev/null); then
		# Resolve symlinks, so that postgres is looked for beside the real initdb.
		dir=$(dirname "$(readlink -f "$initdb")")
		if usable_bindir "$dir"; then
			printf '%s\n' "$dir"
			return 0
		fi
	fi
	# Newest first: sort -V orders 9.6 < 13 < 15 < 16.
	while IFS= read -r dir; do
		if usable_bindir "$dir"; then
			printf '%s\n' "$dir"
			return 0
		fi
	done < <(compgen -G '/usr/lib/postgresql/*/bin' | sort -rV)
	return 1
}

# find_client NAME prints the path of a client program (psql, pg_isready),
# preferring the one beside the server.
find_client() {
	if [[ -x $BINDIR/$1 ]]; then
		printf '%s\n' "$BINDIR/$1"
	elif command -v "$1" 2>/dev/null; then
		:
	else
		die "cannot find $1 (it comes with the PostgreSQL client package)"
	fi
}

# ---------------------------------------------------------------- install

# install_server installs the Debian package `postgresql` (the distribution's
# current server and client) when SORTIE_TESTPG_INSTALL and the user allow it.
# It fails, saying why, when it installs nothing.
install_server() {
	local bindir_set=false
	[[ -n ${SORTIE_TESTPG_BINDIR:-} ]] && bindir_set=true
	apt_install PostgreSQL postgresql "${SORTIE_TESTPG_INSTALL:-auto}" "$bindir_set"
}

# ---------------------------------------------------------------- running as the server's user

# initdb and postgres refuse to run as root. RUN_AS is the user they run as
# when we are root, empty otherwise.
RUN_AS=

choose_user() {
	[[ $(id -u) -eq 0 ]] || return 0
	if id -u postgres >/dev/null 2>&1; then
		RUN_AS=postgres
		return 0
	fi
	RUN_AS=sortie-pg
	if ! id -u "$RUN_AS" >/dev/null 2>&1; then
		log "creating system user $RUN_AS to run PostgreSQL (it refuses to run as root)"
		useradd --system --no-create-home --home-dir /nonexistent \
			--shell /usr/sbin/nologin "$RUN_AS"
	fi
}

# exec_as_server CMD... replaces the shell with CMD run as RUN_AS (or as
# ourselves), from / so that a current directory the user cannot enter
# (root's home) does not matter. Run in the background, its PID ($!) is
# CMD's, or that of runuser waiting for CMD, with no shell in between.
exec_as_server() {
	cd /
	if [[ -z $RUN_AS ]]; then
		exec "$@"
	elif command -v runuser >/dev/null 2>&1; then
		exec runuser -u "$RUN_AS" -- "$@"
	else
		exec su -s /bin/sh "$RUN_AS" -c "$(printf '%q ' "$@")"
	fi
}

# as_server CMD... runs CMD as RUN_AS (or as ourselves) and waits for it.
as_server() { (exec_as_server "$@"); }

# ---------------------------------------------------------------- processes



# stop_pid PID [MODE]: fast shutdown (SIGINT: roll back, close connections,
# checkpoint, exit) or, with MODE immediate, immediate shutdown (SIGQUIT:
# abort every backend, no checkpoint, crash recovery at the next start);
# then SIGKILL after STOP_TIMEOUT seconds.
stop_pid() {
	local sig=INT
	[[ ${2:-fast} == immediate ]] && sig=QUIT
	stop_pids "$sig" "$1"
}


# port_reserved PORT succeeds when the state file of another server of this
# script records PORT, or a start of this script picked it and is launching
# on it (RESERVE): that server may be down for a restart, its port free for
# a moment, and a server started on it then would get its clients.
port_reserved() {
	local f
	for f in "${TMPDIR:-/tmp}"/sortie-testpg.*/"$STATE_FILE" /tmp/sortie-testpg.*/"$STATE_FILE"; do
		if [[ -f $f ]] && grep -Eqx "(PORT|RESERVE)=$1" "$f"; then
			return 0
		fi
	done
	return 1
}

# reserve_port FROM prints the first port from FROM that is free and
# reserved by no state file, after recording it as RESERVE in the state file
# of WORK, all while holding PORT_LOCK: two starts never pick the same port,
# however long one of them is held up between its pick and its launch.
reserve_port() {
	local port=$1 lock
	[[ -e $PORT_LOCK ]] || (umask 0 && : >>"$PORT_LOCK") 2>/dev/null || true
	# Read-only: /tmp's protected_regular refuses opening another user's
	# file there for writing, and flock needs no more.
	exec {lock}<"$PORT_LOCK" || die "cannot open $PORT_LOCK"
	flock "$lock" || die "cannot lock $PORT_LOCK"
	while :; do
		((port <= LAST_PORT)) || die "no free port in $FIRST_PORT-$LAST_PORT on 127.0.0.1"
		if port_free "$port" && ! port_reserved "$port"; then
			break
		fi
		port=$((port + 1))
	done
	printf 'RESERVE=%s\n' "$port" >"$WORK/$STATE_FILE.new"
	mv -f "$WORK/$STATE_FILE.new" "$WORK/$STATE_FILE"
	exec {lock}>&-
	printf '%s\n' "$port"
}

# ---------------------------------------------------------------- start

WORK=           # the temporary directory while `start` runs
SERVER_PID=     # the postmaster, once it runs
LAUNCHER=       # what we started in the background: postgres, or runuser

# cleanup_failed_start undoes a start that did not finish: no server or
# directory is left behind.
cleanup_failed_start() {
	local status=$?
	[[ $status -ne 0 ]] || return 0
	if [[ -n $REMOVE_POLICY ]]; then
		"${AS_ROOT[@]}" rm -f "$REMOVE_POLICY" || true
	fi
	# A server that never became ready may not have been noticed yet.
	if [[ -z $SERVER_PID && -n $WORK && -s $WORK/data/postmaster.pid ]]; then
		SERVER_PID=$(head -n 1 "$WORK/data/postmaster.pid")
	fi
	if [[ -n $SERVER_PID ]] && alive "$SERVER_PID"; then
		stop_pid "$SERVER_PID" || true
	fi
	if [[ -n $LAUNCHER ]] && alive "$LAUNCHER"; then
		# No postmaster.pid: whatever runs is not a working server. runuser
		# passes SIGTERM on to the command it runs.
		kill -TERM "$LAUNCHER" 2>/dev/null || true
	fi
	if [[ -n $WORK && -d $WORK ]]; then
		rm -rf -- "$WORK"
	fi
	exit "$status"
}

# start_server PORT starts the postmaster on PORT and waits until it accepts
# connections. It returns 2 when the port was taken, 1 on any other failure.
start_server() {
	local port=$1 deadline=$((SECONDS + READY_TIMEOUT))
	# Each start has a log of its own; the earlier starts' logs (before a
	# restart or `up`) go on in postgres.old.log.
	if [[ -s $WORK/postgres.log ]]; then
		cat "$WORK/postgres.log" >>"$WORK/postgres.old.log"
	fi
	: >"$WORK/postgres.log"
	[[ -z $RUN_AS ]] || chown "$RUN_AS:" "$WORK/postgres.log"
	# The server must hold none of our stdin, stdout, stderr or fd 3:
	# `$(testpg.sh start)` waits for every process holding its stdout open.
	exec_as_server "$BINDIR/postgres" -D "$WORK/data" -p "$port" \
		</dev/null >>"$WORK/postgres.log" 2>&1 3>&- &
	LAUNCHER=$! # postgres itself, or runuser waiting for it
	while ((SECONDS < deadline)); do
		if [[ -z $SERVER_PID && -s $WORK/data/postmaster.pid ]]; then
			SERVER_PID=$(head -n 1 "$WORK/data/postmaster.pid")
		fi
		# Ask through the unix socket in $WORK: only our server can answer
		# there, while on 127.0.0.1:PORT another one may have just started.
		# The postmaster binds TCP before the socket and exits if it cannot.
		if "$PG_ISREADY" -q -h "$WORK" -p "$port" -U "$DB_USER" -d postgres -t 1; then
			# postmaster.pid is written before the server accepts connections.
			[[ -n $SERVER_PID ]] || SERVER_PID=$(head -n 1 "$WORK/data/postmaster.pid")
			return 0
		fi
		if ! alive "$LAUNCHER"; then
			SERVER_PID=
			LAUNCHER=
			if grep -q 'could not bind\|Address already in use' "$WORK/postgres.log"; then
				return 2
			fi
			break
		fi
		sleep 0.1
	done
	log "PostgreSQL did not start on 127.0.0.1:$port within ${READY_TIMEOUT}s; its log ($WORK/postgres.log):"
	sed 's/^/  | /' "$WORK/postgres.log"
	return 1
}

cmd_start() {
	[[ $# -eq 0 ]] || usage
	trap cleanup_failed_start EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM

	WORK=$(mktemp -d "${TMPDIR:-/tmp}/sortie-testpg.XXXXXX")
	if ((${#WORK} > 80)); then
		# The socket path, $WORK/.s.PGSQL.PORT, must fit in 107 bytes.
		rm -rf -- "$WORK"
		WORK=$(mktemp -d /tmp/sortie-testpg.XXXXXX)
	fi

	if ! BINDIR=$(find_bindir); then
		install_server || die "no PostgreSQL $MIN_MAJOR+ server found (initdb and postgres, on PATH or in" \
			"/usr/lib/postgresql/*/bin${SORTIE_TESTPG_BINDIR:+, or in SORTIE_TESTPG_BINDIR=$SORTIE_TESTPG_BINDIR})." \
			"Install it (Debian/Ubuntu: sudo apt-get install postgresql), or point" \
			"SORTIE_TEST_POSTGRES_URL at a server of your own."
		BINDIR=$(find_bindir) || die "installed PostgreSQL, but still no usable server binaries"
	fi
	PG_ISREADY=$(find_client pg_isready)
	local psql
	psql=$(find_client psql)
	log "using $("$BINDIR/postgres" --version) from $BINDIR"

	choose_user
	if [[ -n $RUN_AS ]]; then
		chown "$RUN_AS:" "$WORK"
		if ! as_server test -w "$WORK"; then
			# TMPDIR is somewhere RUN_AS cannot reach (under /root, say).
			rm -rf -- "$WORK"
			WORK=$(mktemp -d /tmp/sortie-testpg.XXXXXX)
			chown "$RUN_AS:" "$WORK"
		fi
	fi

	# C locale and UTF-8: minimal machines often have no other locale.
	# --no-sync only skips flushing the new cluster's files once; the server
	# itself runs with fsync on.
	local out
	if ! out=$(as_server "$BINDIR/initdb" -D "$WORK/data" -U "$DB_USER" --auth=trust \
		-E UTF8 --locale=C --no-sync 2>&1); then
		printf '%s\n' "$out"
		die "initdb failed"
	fi

	# Written into the cluster's own configuration (later settings win), so
	# the directory says how its server runs. The port is given when starting.
	cat >>"$WORK/data/postgresql.conf" <<EOF

# scripts/testpg.sh: a throwaway server for the tests.
listen_addresses = '127.0.0.1'
unix_socket_directories = '$WORK'
fsync = on
max_connections = 400
shared_buffers = 256MB
logging_collector = off
EOF
	# Trust, and only for the local socket (inside $WORK, mode 0700) and
	# 127.0.0.1; initdb's default also lets in ::1, where we do not listen.
	cat >"$WORK/data/pg_hba.conf" <<'EOF'
# scripts/testpg.sh: TYPE  DATABASE  USER  ADDRESS       METHOD
local all all trust
host  all all 127.0.0.1/32 trust
EOF

	local port=$FIRST_PORT status
	while :; do
		port=$(reserve_port "$port")
		status=0
		start_server "$port" || status=$?
		case $status in
		0) break ;;
		2)
			log "port $port was taken meanwhile; trying the next one"
			port=$((port + 1))
			;;
		*) exit 1 ;;
		esac
	done

	printf 'PID=%s\nPORT=%s\n' "$SERVER_PID" "$port" >"$WORK/$STATE_FILE.new"
	mv -f "$WORK/$STATE_FILE.new" "$WORK/$STATE_FILE"

	"$psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U "$DB_USER" -d postgres \
		-c "CREATE DATABASE $DB_NAME" || die "could not create database $DB_NAME"

	local url="postgres://$DB_USER@127.0.0.1:$port/$DB_NAME?sslmode=disable"
	log "PostgreSQL (pid $SERVER_PID) is listening on 127.0.0.1:$port, files in $WORK"
	log "stop it with: scripts/testpg.sh stop $WORK"
	printf 'export SORTIE_TEST_POSTGRES_URL=%q\n' "$url" >&3
	printf 'export SORTIE_TESTPG_DIR=%q\n' "$WORK" >&3
	trap - EXIT INT TERM
}

# ---------------------------------------------------------------- stop

cmd_stop() {
	[[ $# -le 1 ]] || usage
	local dir=${1:-${SORTIE_TESTPG_DIR:-}}
	# These lines let `eval "$(scripts/testpg.sh stop)"` forget the server.
	printf 'unset SORTIE_TEST_POSTGRES_URL SORTIE_TESTPG_DIR\n' >&3
	if [[ -z $dir ]]; then
		log "nothing to stop: no DIR given and SORTIE_TESTPG_DIR is not set"
		return 0
	fi
	if [[ ! -e $dir ]]; then
		log "nothing to stop: $dir does not exist (already stopped?)"
		return 0
	fi
	# Delete only what this script made, never a directory named by mistake.
	if [[ ! -f $dir/$STATE_FILE ]]; then
		die "$dir has no $STATE_FILE: not a server started by this script; not touching it"
	fi
	dir=$(cd "$dir" && pwd -P)

	local pid
	pid=$(sed -n 's/^PID=\([0-9][0-9]*\)$/\1/p' "$dir/$STATE_FILE")
	if [[ -z $pid ]]; then
		log "no PID in $dir/$STATE_FILE"
	elif ! alive "$pid"; then
		log "server $pid is not running"
	elif ! is_our_server "$pid" "$dir/data"; then
		log "process $pid is not the server of $dir (it exited, and its PID was reused); not killing it"
	else
		stop_pid "$pid" || die "could not stop server $pid; left $dir in place"
		log "stopped server $pid"
	fi
	rm -rf -- "$dir"
	log "removed $dir"
}

# ---------------------------------------------------------------- restart

# cleanup_failed_restart stops a server that a restart launched but that did
# not become ready, so that no server runs unrecorded in the state file.
cleanup_failed_restart() {
	local status=$?
	[[ $status -ne 0 ]] || return 0
	if [[ -z $SERVER_PID && -s $WORK/data/postmaster.pid ]]; then
		SERVER_PID=$(head -n 1 "$WORK/data/postmaster.pid")
	fi
	if [[ -n $SERVER_PID ]] && alive "$SERVER_PID"; then
		stop_pid "$SERVER_PID" || true
	fi
	if [[ -n $LAUNCHER ]] && alive "$LAUNCHER"; then
		kill -TERM "$LAUNCHER" 2>/dev/null || true
	fi
	exit "$status"
}

# check_mode MODE fails unless MODE is a shutdown mode stop_pid knows.
check_mode() {
	[[ $1 == fast || $1 == immediate ]] || die "MODE must be fast or immediate, got \"$1\""
}

# server_state DIR sets STATE_DIR (DIR, resolved), STATE_PID and STATE_PORT
# from the state file of the server of DIR.
server_state() {
	[[ -f $1/$STATE_FILE ]] || die "$1 has no $STATE_FILE: not a server started by this script"
	STATE_DIR=$(cd "$1" && pwd -P)
	STATE_PID=$(sed -n 's/^PID=\([0-9][0-9]*\)$/\1/p' "$STATE_DIR/$STATE_FILE")
	STATE_PORT=$(sed -n 's/^PORT=\([0-9][0-9]*\)$/\1/p' "$STATE_DIR/$STATE_FILE")
	[[ -n $STATE_PID && -n $STATE_PORT ]] || die "no PID or PORT in $STATE_DIR/$STATE_FILE"
}

# cmd_down DIR [MODE]: shut down the server of DIR, leaving its files, its
# state file and so its port reserved, for `up` or `stop` later.
cmd_down() {
	[[ $# -ge 1 && $# -le 2 ]] || usage
	local mode=${2:-fast}
	check_mode "$mode"
	server_state "$1"
	if alive "$STATE_PID"; then
		is_our_server "$STATE_PID" "$STATE_DIR/data" || die "process $STATE_PID is not the server of $STATE_DIR; not killing it"
		stop_pid "$STATE_PID" "$mode" || die "could not stop server $STATE_PID"
		log "stopped server $STATE_PID ($mode shutdown)"
	else
		log "server $STATE_PID is not running"
	fi
}

# cmd_up DIR: start the server of DIR again, on the port in its state file
# and on the same data directory (after an immediate shutdown, the server
# recovers from its write-ahead log first).
cmd_up() {
	[[ $# -eq 1 ]] || usage
	server_state "$1"
	if alive "$STATE_PID" && is_our_server "$STATE_PID" "$STATE_DIR/data"; then
		log "server $STATE_PID is already running"
		return 0
	fi
	BINDIR=$(find_bindir) || die "no PostgreSQL $MIN_MAJOR+ server found"
	PG_ISREADY=$(find_client pg_isready)
	choose_user
	WORK=$STATE_DIR
	trap cleanup_failed_restart EXIT
	local status=0
	start_server "$STATE_PORT" || status=$?
	case $status in
	0) ;;
	2) die "port $STATE_PORT was taken while the server was down" ;;
	*) exit 1 ;;
	esac
	printf 'PID=%s\nPORT=%s\n' "$SERVER_PID" "$STATE_PORT" >"$STATE_DIR/$STATE_FILE"
	trap - EXIT
	log "PostgreSQL (pid $SERVER_PID) is listening on 127.0.0.1:$STATE_PORT again"
}

# cmd_restart DIR [SECS] [MODE]: a shutdown of the server of DIR (what
# clients see when PostgreSQL restarts: fast by default, immediate for a
# crash), a pause of SECS seconds with no server, and a start on the same
# port and data directory. The tests of what clients do while the server is
# away use it (store/pgstore, cmd/sortie/internal/chaos).
cmd_restart() {
	[[ $# -ge 1 && $# -le 3 ]] || usage
	local dir=$1 down=${2:-0} mode=${3:-fast}
	[[ $down =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "SECS must be a number of seconds, got \"$down\""
	check_mode "$mode"
	cmd_down "$dir" "$mode"
	sleep "$down"
	cmd_up "$dir"
}

# ---------------------------------------------------------------- run

RUN_DIR=

stop_run_server() {
	if [[ -n $RUN_DIR ]]; then
		bash "$SELF" stop "$RUN_DIR" >/dev/null || true
		RUN_DIR=
	fi
}

cmd_run() {
	[[ $# -ge 1 ]] || usage
	if [[ -n ${SORTIE_TEST_POSTGRES_URL:-} ]]; then
		log "using the server in SORTIE_TEST_POSTGRES_URL"
		exec "$@" >&3 3>&-
	fi

	local exports
	# A child process, so that its traps and its exit on failure stay its own.
	if ! exports=$(bash "$SELF" start 3>&-); then
		if [[ ${CI:-} == true ]]; then
			die "could not start PostgreSQL, and CI=true: failing rather than skipping the PostgreSQL tests"
		fi
		cat <<'EOF'

################################################################
  testpg: could not start PostgreSQL (see above).
  The PostgreSQL tests will be SKIPPED. Install the server
  (sudo apt-get install postgresql) or set SORTIE_TEST_POSTGRES_URL.
################################################################

EOF
		exec "$@" >&3 3>&-
	fi
	# Stop the server however we leave. On INT and TERM, bash runs the trap
	# once CMD has exited (CMD gets the same Ctrl-C from the terminal).
	trap stop_run_server EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	eval "$exports"
	RUN_DIR=$SORTIE_TESTPG_DIR
	export SORTIE_TEST_POSTGRES_URL SORTIE_TESTPG_DIR

	local status=0
	"$@" >&3 3>&- || status=$?
	stop_run_server
	return "$status"
}

# ---------------------------------------------------------------- main

[[ $# -ge 1 ]] || usage
sub=$1
shift
case $sub in
start) cmd_start "$@" ;;
stop) cmd_stop "$@" ;;
restart) cmd_restart "$@" ;;
down) cmd_down "$@" ;;
up) cmd_up "$@" ;;
run) cmd_run "$@" ;;
*) usage ;;
esac
