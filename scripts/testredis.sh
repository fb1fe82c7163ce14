#!/usr/bin/env bash
# testredis.sh: throwaway Redis servers for the tests (internal/testkit/redistest).
#
#   eval "$(scripts/testredis.sh start)"   start a standalone server; print the
#                                       variables to export
#   eval "$(scripts/testredis.sh start --cluster)"
#                                       start a Redis Cluster of three primaries
#   scripts/testredis.sh stop [DIR]     stop it and delete its files
#   scripts/testredis.sh restart DIR [SECS] [MODE]  shut down, SECS (default 0)
#                                       with no server, start again on the same ports
#   scripts/testredis.sh down DIR [MODE]  shut it down, keeping its files and ports
#   scripts/testredis.sh up DIR         start a server that is down again
#   scripts/testredis.sh run CMD...     start a server and a cluster, run CMD
#                                       with them, stop them
#
# `start` takes two options: --cluster, and --fsync always|everysec (the
# default, or SORTIE_TESTREDIS_FSYNC) for Redis's appendfsync. `always`
# writes and fsyncs the append-only file before Redis replies, so an
# acknowledged write survives a crash; `everysec` writes the file before
# Redis replies and fsyncs it once a second, so killing the process loses
# nothing (the kernel keeps what was written), while a machine crash or a
# power cut may lose about the last second of acknowledged writes (two when
# the disk stalls). The durability tests ask for `always`.
#
# MODE is how a server goes down: term (the default: SIGTERM, which Redis
# handles like SHUTDOWN: it writes and fsyncs the append-only file and exits)
# or kill (SIGKILL: the process dies at once, as in a crash, and so does any
# child it forked to rewrite its append-only file or snapshot; the next start
# replays the append-only file, dropping a torn last command). In a cluster,
# every node goes down and comes up together.
#
# Each server is a fresh redis-server in a `mktemp -d` directory, started
# directly (no systemd, no init script, no daemonize), listening on
# 127.0.0.1 only, on a free port from 63790 to 63890, with protected mode on,
# no password (anyone on this machine can connect, which is fine for a
# throwaway server of test data and is why it never listens elsewhere),
# persistence by the append-only file only (appendonly yes, save ""),
# maxmemory-policy noeviction, as the Redis store requires, and DEBUG
# allowed from 127.0.0.1 (DEBUG SLEEP, for tests of a slow server). A standalone
# server lives in DIR/node1; a cluster's three nodes in DIR/node1..node3,
# each with a cluster bus port of its own from the same range. Each node's
# redis.conf, append-only file (appendonlydir), log (redis.log; the logs of
# earlier starts in redis.old.log) and cluster state (nodes.conf) are there.
#
# `start` prints only `export` lines on stdout, and everything else on stderr:
#   export SORTIE_TEST_REDIS_URL=redis://127.0.0.1:PORT/0
#   export SORTIE_TESTREDIS_DIR=/tmp/sortie-testredis.XXXXXX
# or, with --cluster:
#   export SORTIE_TEST_REDIS_CLUSTER=127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3
#   export SORTIE_TESTREDIS_CLUSTER_DIR=/tmp/sortie-testredis.XXXXXX
# The servers' PIDs and ports are recorded in DIR/testredis.state, and `stop`
# ends them by those PIDs, never by name: a Redis this script did not start
# (a system service, another user's) is never used or stopped. `restart`,
# `down` and `up` (for the crash and reconnect tests) stop them the same way
# and start them again on the ports in that file, on the same files, so the
# append-only file is replayed; `start` never takes a port another server's
# state file records, even while that server is down, and picks its ports
# under a lock (/tmp/sortie-testredis.ports.lock), recording them before
# it lets go, so that concurrent starts never pick the same one.
#
# When redis-server or redis-cli is missing, `start` installs the Debian
# package `redis-server` with apt-get if it may (we are root, or sudo works
# without a password), without letting the package start its own service;
# otherwise it says what to install and fails. The server must be Redis 7.0
# or newer: the Redis store keeps its scripts in a Functions library.
#
# `run` is what `make test` uses. It starts a standalone server unless
# SORTIE_TEST_REDIS_URL is set, and a cluster unless SORTIE_TEST_REDIS_CLUSTER
# is set, runs CMD with the four variables exported, and stops what it
# started, also when CMD fails. When a server cannot be started it fails under
# CI=true; elsewhere it warns loudly and runs CMD anyway, and the Redis tests
# skip (internal/testkit/redistest).
#
# Environment:
#   SORTIE_TEST_REDIS_URL        a standalone server to use instead of
#                                starting one (run)
#   SORTIE_TEST_REDIS_CLUSTER    a cluster to use (run): its primaries'
#                                host:port, comma-separated
#   SORTIE_TESTREDIS_DIR         what `stop` with no DIR cleans up, with
#   SORTIE_TESTREDIS_CLUSTER_DIR
#   SORTIE_TESTREDIS_FSYNC       always or everysec (default): start's --fsync
#   SORTIE_TESTREDIS_PRELOAD     a shared object the servers that start, up
#                                and restart launch run with (LD_PRELOAD):
#                                the power-cut shim of the crash tests
#                                (internal/testkit/redistest/powercut)
#   SORTIE_TESTREDIS_BINDIR      look for redis-server and redis-cli only in
#                                this directory, and never install; set it to
#                                a directory without them (/nonexistent) to
#                                see what happens on a machine with no server
#   SORTIE_TESTREDIS_INSTALL     auto (default): install when missing and
#                                allowed; no: never install; dry-run: print
#                                the install commands instead of running them
#                                (a test aid)
#   SORTIE_TESTREDIS_PICKED      a file that start writes its (first node's)
#                                picked ports to, then waits until it is
#                                removed, up to two minutes, before it
#                                launches on them (a test aid: another start
#                                meanwhile must not take them)
#   CI                           true: a server that cannot be started fails `run`
set -euo pipefail

readonly SELF="${BASH_SOURCE[0]}"
readonly FIRST_PORT=63790
readonly LAST_PORT=63890
readonly MIN_MAJOR=7          # Functions (FUNCTION LOAD, FCALL) came in Redis 7.0
readonly CLUSTER_NODES=3      # primaries, no replicas
readonly READY_TIMEOUT=30     # seconds for a server to answer, loading its AOF included
readonly CLUSTER_TIMEOUT=60   # seconds for a cluster to reach cluster_state:ok on every node
readonly STOP_TIMEOUT=20      # seconds between SIGTERM and SIGKILL
readonly PORT_LOCK=/tmp/sortie-testredis.ports.lock  # held while a start picks its ports
readonly CLI_TIMEOUT=10       # seconds for one redis-cli call (a port held by something else may never answer)
readonly STATE_FILE=testredis.state

# stdout is reserved for the `export` lines that callers eval, so everything
# else goes to stderr: fd 3 keeps the real stdout, and fd 1 becomes stderr,
# which catches the output of every command run below (apt-get, redis-cli...).
exec 3>&1 1>&2

readonly LOG_NAME=testredis
# shellcheck source=scripts/testserver.sh
source "$(dirname "$SELF")/testserver.sh"

usage() {
	cat <<'EOF'
usage: scripts/testredis.sh start [--cluster] [--fsync always|everysec]
                                        start a server (or a cluster); eval the output
       scripts/testredis.sh stop [DIR]  stop it (DIR defaults to $SORTIE_TESTREDIS_DIR
                                        and $SORTIE_TESTREDIS_CLUSTER_DIR)
       scripts/testredis.sh restart DIR [SECS] [MODE]
                                        stop it, wait SECS, start it again
       scripts/testredis.sh down DIR [MODE]
                                        stop it, keeping its files and ports
       scripts/testredis.sh up DIR      start it again after down
       scripts/testredis.sh run CMD...  run CMD with a server and a cluster, then stop them
MODE is term (the default) or kill.
EOF
	exit 2
}

# ---------------------------------------------------------------- binaries

REDIS_SERVER= # the redis-server we run
REDIS_CLI=    # the redis-cli that talks to it
TOO_OLD=      # a server found but too old, for the message when none is usable

# server_version SERVER prints the version of the redis-server SERVER ("7.0.15").
server_version() {
	local v
	v=$("$1" --version 2>/dev/null) || return 1
	# "Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 ..." -> "7.0.15"
	v=${v#*v=}
	printf '%s\n' "${v%% *}"
}

# find_bins sets REDIS_SERVER and REDIS_CLI to the programs in
# SORTIE_TESTREDIS_BINDIR if set, else to those on PATH, and fails when
# either is missing or the server is older than MIN_MAJOR.
find_bins() {
	local server cli version major
	if [[ -n ${SORTIE_TESTREDIS_BINDIR:-} ]]; then
		server=$SORTIE_TESTREDIS_BINDIR/redis-server
		cli=$SORTIE_TESTREDIS_BINDIR/redis-cli
	else
		server=$(command -v redis-server 2>/dev/null) || return 1
		cli=$(command -v redis-cli 2>/dev/null) || return 1
	fi
	[[ -x $server && -x $cli ]] || return 1
	version=$(server_version "$server") || version=
	major=${version%%[!0-9]*}
	if [[ -z $major || $major -lt $MIN_MAJOR ]]; then
		TOO_OLD="Redis ${version:-of unknown version} ($server)"
		log "ignoring $TOO_OLD: need $MIN_MAJOR.0 or newer, for Functions"
		return 1
	fi
	REDIS_SERVER=$server
	REDIS_CLI=$cli
}

# need_bins finds the programs, installing them when missing and allowed,
# and fails saying what to do when it cannot.
need_bins() {
	find_bins && return 0
	if ! install_server; then
		if [[ -n $TOO_OLD ]]; then
			die "found only $TOO_OLD: sortie needs Redis $MIN_MAJOR.0 or newer, for Functions." \
				"Install a newer one, or point SORTIE_TEST_REDIS_URL at a server of your own."
		fi
		die "no Redis $MIN_MAJOR.0+ found (redis-server and redis-cli, on PATH${SORTIE_TESTREDIS_BINDIR:+ or in SORTIE_TESTREDIS_BINDIR=$SORTIE_TESTREDIS_BINDIR})." \
			"Install it (Debian/Ubuntu: sudo apt-get install redis-server), or point" \
			"SORTIE_TEST_REDIS_URL (and SORTIE_TEST_REDIS_CLUSTER) at servers of your own."
	fi
	find_bins || die "installed Redis, but still no usable redis-server ${TOO_OLD:+(only $TOO_OLD)}"
}

# ---------------------------------------------------------------- install

# install_server installs the Debian package `redis-server` (the server, and
# redis-cli through redis-tools) when SORTIE_TESTREDIS_INSTALL and the user
# allow it. It fails, saying why, when it installs nothing.
install_server() {
	local bindir_set=false
	[[ -n ${SORTIE_TESTREDIS_BINDIR:-} ]] && bindir_set=true
	apt_install Redis redis-server "${SORTIE_TESTREDIS_INSTALL:-auto}" "$bindir_set"
}

# ---------------------------------------------------------------- processes



# stop_mode MODE PID... ends the servers PID...: with MODE term, SIGTERM to
# all of them, then SIGKILL to those still running after STOP_TIMEOUT
# seconds; with MODE kill, SIGKILL at once. It waits until they are gone.
#
# A crash (kill) takes each server's forked children with it, as a power cut
# would: an append-only file rewrite or a snapshot in progress. One left
# running would keep the listening socket it inherited, and the next start
# could not bind the port. Each server is stopped (SIGSTOP) before its
# children are read, so it forks none after.
stop_mode() {
	if [[ $1 != kill ]]; then
		shift
		stop_pids TERM "$@"
		return
	fi
	shift
	local pid kids=()
	for pid in "$@"; do
		kill -STOP "$pid" 2>/dev/null || continue
		mapfile -t -O "${#kids[@]}" kids < <(children "$pid")
	done
	stop_pids KILL "$@" "${kids[@]}"
}

# cli PORT ARGS... runs redis-cli against 127.0.0.1:PORT, giving up after
# CLI_TIMEOUT seconds.
cli() {
	local port=$1
	shift
	timeout "$CLI_TIMEOUT" "$REDIS_CLI" -h 127.0.0.1 -p "$port" "$@"
}

# server_pid PORT prints the PID of the server answering on PORT (INFO
# server's process_id), so that we know the server answering is ours.
server_pid() {
	cli "$1" info server 2>/dev/null | tr -d '\r' | sed -n 's/^process_id:\([0-9][0-9]*\)$/\1/p'
}


# port_reserved PORT succeeds when the state file of a server of this script
# (ours being started included) records PORT, as a client or a cluster bus
# port, or as one a start picked and is launching on (RESERVE): that server
# may be down for a restart, its port free for a moment, and a server
# started on it then would get its clients.
port_reserved() {
	local f
	for f in "${TMPDIR:-/tmp}"/sortie-testredis.*/"$STATE_FILE" /tmp/sortie-testredis.*/"$STATE_FILE"; do
		# NODE=PORT PID BUSPORT, RESERVE=PORT
		if [[ -f $f ]] && grep -Eq "^(NODE=($1 [0-9]+ [0-9]+|[0-9]+ [0-9]+ $1)|RESERVE=$1)\$" "$f"; then
			return 0
		fi
	done
	return 1
}

# next_port FROM prints the first port from FROM to LAST_PORT that is free
# and reserved by no state file.
next_port() {
	local p
	for ((p = $1; p <= LAST_PORT; p++)); do
		if port_free "$p" && ! port_reserved "$p"; then
			printf '%s\n' "$p"
			return 0
		fi
	done
	return 1
}

# ---------------------------------------------------------------- state

# The state file of DIR:
#   KIND=standalone|cluster
#   NODE=PORT PID BUSPORT     one line per server, node1 first; BUSPORT is 0
#                             for a standalone server
KIND=           # standalone or cluster
NODE_PORTS=()   # per node, from node1
NODE_PIDS=()
NODE_BUSES=()
RESERVED=()     # ports start_node picked for the node it is launching
PORT=           # the ports reserve_ports picked: client, cluster bus (0: none)
BUS=

# read_state DIR sets STATE_DIR (DIR, resolved), KIND and the NODE_ arrays
# from the state file of DIR.
read_state() {
	[[ -f $1/$STATE_FILE ]] || die "$1 has no $STATE_FILE: not a server started by this script; not touching it"
	STATE_DIR=$(cd "$1" && pwd -P)
	KIND=$(sed -n 's/^KIND=\([a-z]*\)$/\1/p' "$STATE_DIR/$STATE_FILE")
	NODE_PORTS=() NODE_PIDS=() NODE_BUSES=()
	local port pid bus
	while read -r port pid bus; do
		NODE_PORTS+=("$port")
		NODE_PIDS+=("$pid")
		NODE_BUSES+=("$bus")
	done < <(sed -n 's/^NODE=\([0-9][0-9]*\) \([0-9][0-9]*\) \([0-9][0-9]*\)$/\1 \2 \3/p' "$STATE_DIR/$STATE_FILE")
	[[ $KIND == standalone || $KIND == cluster ]] || die "no KIND in $STATE_DIR/$STATE_FILE"
	[[ ${#NODE_PORTS[@]} -gt 0 ]] || die "no NODE in $STATE_DIR/$STATE_FILE"
}

# write_state DIR writes KIND and the NODE_ arrays to the state file of DIR,
# replacing it at once so that port_reserved never reads half of it.
write_state() {
	local i
	{
		printf 'KIND=%s\n' "$KIND"
		for i in "${!NODE_PORTS[@]}"; do
			printf 'NODE=%s %s %s\n' "${NODE_PORTS[i]}" "${NODE_PIDS[i]}" "${NODE_BUSES[i]}"
		done
		for i in "${RESERVED[@]}"; do
			printf 'RESERVE=%s\n' "$i"
		done
	} >"$1/$STATE_FILE.new"
	mv -f "$1/$STATE_FILE.new" "$1/$STATE_FILE"
}

# running_pids DIR prints the PIDs of the servers of DIR (read_state first)
# that are running, skipping (and saying so) a PID that is now some other
# process.
running_pids() {
	local i pid
	for i in "${!NODE_PIDS[@]}"; do
		pid=${NODE_PIDS[i]}
		alive "$pid" || continue
		if ! is_our_server "$pid" "$1/node$((i + 1))"; then
			log "process $pid is not the server of $1/node$((i + 1)) (it exited, and its PID was reused); not killing it"
			continue
		fi
		printf '%s\n' "$pid"
	done
}

# ---------------------------------------------------------------- start

WORK=           # the directory of the server(s) being started
SERVER_PID=     # the server being launched, until it is in the state file

# cleanup_failed_start undoes a start that did not finish: no server or
# directory is left behind.
cleanup_failed_start() {
	local status=$?
	[[ $status -ne 0 ]] || return 0
	if [[ -n $REMOVE_POLICY ]]; then
		"${AS_ROOT[@]}" rm -f "$REMOVE_POLICY" || true
	fi
	local -a pids=()
	if [[ -n $SERVER_PID ]] && alive "$SERVER_PID"; then
		pids+=("$SERVER_PID")
	fi
	# Servers already recorded: we started each of them moments ago.
	local pid
	for pid in "${NODE_PIDS[@]}"; do
		alive "$pid" && pids+=("$pid")
	done
	if [[ ${#pids[@]} -gt 0 ]]; then
		stop_mode kill "${pids[@]}" || true
	fi
	if [[ -n $WORK && -d $WORK ]]; then
		rm -rf -- "$WORK"
	fi
	exit "$status"
}

# write_config NODEDIR FSYNC CLUSTER writes the node's redis.conf: all it
# runs with but its ports, which launch gives on the command line.
write_config() {
	local node=$1 fsync=$2 cluster=$3
	mkdir -p "$node"
	cat >"$node/redis.conf" <<EOF
# scripts/testredis.sh: a throwaway server for the tests. The port (and the
# cluster bus port) are given on the command line.
bind 127.0.0.1
protected-mode yes
daemonize no
dir "$node"
logfile "$node/redis.log"
# Persistence by the append-only file only, as the Redis store expects.
save ""
appendonly yes
appendfsync $fsync
# Eviction would drop jobs: the store refuses to run with anything else.
maxmemory-policy noeviction
# DEBUG (SLEEP, RELOAD...) for tests of slow or reloading servers; from
# 127.0.0.1 only, where anyone can connect anyway.
enable-debug-command local
EOF
	if $cluster; then
		# A node timeout shorter than the default 15 s: a primary that was
		# down (down/up, restart) is trusted again after twice this.
		cat >>"$node/redis.conf" <<'EOF'
cluster-enabled yes
cluster-config-file nodes.conf
cluster-node-timeout 5000
EOF
	fi
}

# launch NODEDIR PORT BUSPORT starts the server of NODEDIR on PORT (and its
# cluster bus on BUSPORT, unless 0), sets SERVER_PID and waits until it
# answers PING and INFO says it is that process. It returns 2 when a port
# was taken, 1 on any other failure.
launch() {
	local node=$1 port=$2 bus=$3 deadline=$((SECONDS + READY_TIMEOUT))
	local -a args=(--port "$port")
	[[ $bus -eq 0 ]] || args+=(--cluster-port "$bus")
	# Each start has a log of its own; the earlier starts' logs (before a
	# restart or `up`) go on in redis.old.log.
	if [[ -s $node/redis.log ]]; then
		cat "$node/redis.log" >>"$node/redis.old.log"
	fi
	: >"$node/redis.log"
	# The server must hold none of our stdin, stdout, stderr or fd 3:
	# `$(testredis.sh start)` waits for every process holding its stdout
	# open. Its own log is redis.log; what it prints before opening it (a bad
	# option) goes there too. exec, so that $! is redis-server's PID.
	local -a run=("$REDIS_SERVER")
	if [[ -n ${SORTIE_TESTREDIS_PRELOAD:-} ]]; then
		run=(env "LD_PRELOAD=$SORTIE_TESTREDIS_PRELOAD" "$REDIS_SERVER")
	fi
	(cd / && exec "${run[@]}" "$node/redis.conf" "${args[@]}") \
		</dev/null >>"$node/redis.log" 2>&1 3>&- &
	SERVER_PID=$!
	# Not a job of ours: bash would report its death (a kill, when a start
	# fails) on stderr.
	disown "$SERVER_PID"
	while ((SECONDS < deadline)); do
		if ! alive "$SERVER_PID"; then
			SERVER_PID=
			if grep -q 'Address already in use' "$node/redis.log"; then
				return 2
			fi
			break
		fi
		# The answer while loading the append-only file is an error
		# (LOADING), so the server is ready when it answers PONG. Another
		# server may answer on the port while ours fails to bind: check
		# that it is ours.
		if [[ $(cli "$port" ping 2>/dev/null) == PONG && $(server_pid "$port") == "$SERVER_PID" ]]; then
			return 0
		fi
		sleep 0.1
	done
	log "Redis did not start on 127.0.0.1:$port within ${READY_TIMEOUT}s; its log ($node/redis.log):"
	sed 's/^/  | /' "$node/redis.log"
	return 1
}

# reserve_ports FROM CLUSTER sets PORT to the first port from FROM that is
# free and reserved by no state file (and BUS to the next one after it for a
# cluster node, else 0), and records them as RESERVE lines in the state file
# of WORK, all while holding PORT_LOCK: two starts never pick the same port,
# however long one of them is held up between its pick and its launch (a
# loaded machine), and a port another server left for a restart stays its.
reserve_ports() {
	local from=$1 cluster=$2 lock
	# Any user's start may need it: created writable by all.
	[[ -e $PORT_LOCK ]] || (umask 0 && : >>"$PORT_LOCK") 2>/dev/null || true
	# Read-only: /tmp's protected_regular refuses opening another user's
	# file there for writing, and flock needs no more.
	exec {lock}<"$PORT_LOCK" || die "cannot open $PORT_LOCK"
	flock "$lock" || die "cannot lock $PORT_LOCK"
	PORT=$(next_port "$from") || die "no free port in $FIRST_PORT-$LAST_PORT on 127.0.0.1"
	BUS=0
	if $cluster; then
		BUS=$(next_port $((PORT + 1))) || die "no free port in $FIRST_PORT-$LAST_PORT on 127.0.0.1 for a cluster bus"
	fi
	RESERVED=("$PORT")
	[[ $BUS -eq 0 ]] || RESERVED+=("$BUS")
	write_state "$WORK"
	exec {lock}>&-
}

# hold_picked FILE writes PORT and BUS to FILE (which may be a named pipe
# its reader waits on) and waits until FILE is removed
# (SORTIE_TESTREDIS_PICKED).
hold_picked() {
	local deadline=$((SECONDS + 120))
	printf '%s %s\n' "$PORT" "$BUS" >"$1"
	while [[ -e $1 ]]; do
		((SECONDS < deadline)) || die "$1 was not removed within 120s"
		sleep 0.05
	done
}

# start_node N CLUSTER starts node N (1...) of WORK on free ports and
# records it in the state file.
start_node() {
	local n=$1 cluster=$2 from=$FIRST_PORT status
	while :; do
		reserve_ports "$from" "$cluster"
		[[ -z ${SORTIE_TESTREDIS_PICKED:-} || $n -ne 1 ]] || hold_picked "$SORTIE_TESTREDIS_PICKED"
		status=0
		launch "$WORK/node$n" "$PORT" "$BUS" || status=$?
		case $status in
		0) break ;;
		2)
			# Taken by something other than a server of this script.
			if [[ $BUS -eq 0 ]]; then
				log "port $PORT was taken meanwhile; trying the next one"
			else
				log "port $PORT or $BUS was taken meanwhile; trying the next ones"
			fi
			from=$((PORT + 1))
			;;
		*) exit 1 ;;
		esac
	done
	RESERVED=()
	NODE_PORTS+=("$PORT")
	NODE_PIDS+=("$SERVER_PID")
	NODE_BUSES+=("$BUS")
	write_state "$WORK"
	SERVER_PID=
}

# wait_cluster DIR waits until every node of the cluster of DIR (read_state
# first) says cluster_state:ok and knows all the others, so that a client
# sees all the slots served wherever it asks first.
wait_cluster() {
	local deadline=$((SECONDS + CLUSTER_TIMEOUT)) port ok info
	while ((SECONDS < deadline)); do
		ok=0
		for port in "${NODE_PORTS[@]}"; do
			info=$(cli "$port" cluster info 2>/dev/null | tr -d '\r') || continue
			if [[ $info == *cluster_state:ok* && $info == *"cluster_known_nodes:${#NODE_PORTS[@]}"* ]]; then
				ok=$((ok + 1))
			fi
		done
		[[ $ok -lt ${#NODE_PORTS[@]} ]] || return 0
		sleep 0.1
	done
	log "the cluster in $1 did not reach cluster_state:ok on every node within ${CLUSTER_TIMEOUT}s:"
	for port in "${NODE_PORTS[@]}"; do
		log "  127.0.0.1:$port: $(cli "$port" cluster info 2>&1 | tr -d '\r' | grep -E '^cluster_(state|known_nodes|slots_ok)' | tr '\n' ' ')"
	done
	return 1
}

cmd_start() {
	local cluster=false fsync=${SORTIE_TESTREDIS_FSYNC:-everysec}
	while [[ $# -gt 0 ]]; do
		case $1 in
		--cluster) cluster=true ;;
		--fsync)
			[[ $# -ge 2 ]] || usage
			fsync=$2
			shift
			;;
		--fsync=*) fsync=${1#--fsync=} ;;
		*) usage ;;
		esac
		shift
	done
	[[ $fsync == always || $fsync == everysec ]] ||
		die "--fsync (or SORTIE_TESTREDIS_FSYNC) must be always or everysec, got \"$fsync\""

	trap cleanup_failed_start EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM

	need_bins
	log "using Redis $(server_version "$REDIS_SERVER") ($REDIS_SERVER)"

	WORK=$(mktemp -d "${TMPDIR:-/tmp}/sortie-testredis.XXXXXX")
	if [[ $WORK == *[[:space:]\"\\\']* ]]; then
		# redis.conf quotes the paths, but keep them plain.
		rm -rf -- "$WORK"
		WORK=$(mktemp -d /tmp/sortie-testredis.XXXXXX)
	fi
	# Resolved, as /proc/PID/cwd shows the server's directory (is_our_server).
	WORK=$(cd "$WORK" && pwd -P)

	local nodes=1 n
	KIND=standalone
	if $cluster; then
		nodes=$CLUSTER_NODES
		KIND=cluster
	fi
	for ((n = 1; n <= nodes; n++)); do
		write_config "$WORK/node$n" "$fsync" "$cluster"
		start_node "$n" "$cluster"
	done

	if ! $cluster; then
		local url=redis://127.0.0.1:${NODE_PORTS[0]}/0
		log "Redis (pid ${NODE_PIDS[0]}, appendfsync $fsync) is listening on 127.0.0.1:${NODE_PORTS[0]}, files in $WORK"
		log "stop it with: scripts/testredis.sh stop $WORK"
		printf 'export SORTIE_TEST_REDIS_URL=%q\n' "$url" >&3
		printf 'export SORTIE_TESTREDIS_DIR=%q\n' "$WORK" >&3
		trap - EXIT INT TERM
		return 0
	fi

	local -a addrs=()
	local port
	for port in "${NODE_PORTS[@]}"; do
		addrs+=("127.0.0.1:$port")
	done
	# Three primaries with a third of the slots each; the nodes must be empty.
	if ! timeout 120 "$REDIS_CLI" --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes \
		</dev/null >"$WORK/cluster-create.log" 2>&1; then
		sed 's/^/  | /' "$WORK/cluster-create.log"
		die "redis-cli --cluster create failed"
	fi
	wait_cluster "$WORK" || exit 1
	local joined
	joined=$(IFS=,; printf '%s' "${addrs[*]}")
	log "Redis Cluster (pids ${NODE_PIDS[*]}, appendfsync $fsync) is serving on $joined, files in $WORK"
	log "stop it with: scripts/testredis.sh stop $WORK"
	printf 'export SORTIE_TEST_REDIS_CLUSTER=%q\n' "$joined" >&3
	printf 'export SORTIE_TESTREDIS_CLUSTER_DIR=%q\n' "$WORK" >&3
	trap - EXIT INT TERM
}

# ---------------------------------------------------------------- stop

# stop_dir DIR stops the server(s) of DIR and deletes DIR.
stop_dir() {
	local dir=$1
	if [[ ! -e $dir ]]; then
		log "nothing to stop: $dir does not exist (already stopped?)"
		return 0
	fi
	# Delete only what this script made, never a directory named by mistake.
	read_state "$dir"
	dir=$STATE_DIR
	local -a pids
	mapfile -t pids < <(running_pids "$dir")
	if [[ ${#pids[@]} -eq 0 ]]; then
		log "no server of $dir is running"
	else
		stop_mode term "${pids[@]}" || die "could not stop server(s) ${pids[*]}; left $dir in place"
		log "stopped $KIND server(s) ${pids[*]}"
	fi
	rm -rf -- "$dir"
	log "removed $dir"
}

# cmd_stop [DIR]: with DIR, stop that server or cluster; without, the ones
# in SORTIE_TESTREDIS_DIR and SORTIE_TESTREDIS_CLUSTER_DIR. It prints the
# `unset` lines that let `eval "$(scripts/testredis.sh stop)"` forget what it
# stopped.
cmd_stop() {
	[[ $# -le 1 ]] || usage
	local -a dirs=()
	if [[ $# -eq 1 ]]; then
		dirs=("$1")
	else
		[[ -z ${SORTIE_TESTREDIS_DIR:-} ]] || dirs+=("$SORTIE_TESTREDIS_DIR")
		[[ -z ${SORTIE_TESTREDIS_CLUSTER_DIR:-} ]] || dirs+=("$SORTIE_TESTREDIS_CLUSTER_DIR")
		if [[ ${#dirs[@]} -eq 0 ]]; then
			log "nothing to stop: no DIR given, and neither SORTIE_TESTREDIS_DIR nor SORTIE_TESTREDIS_CLUSTER_DIR is set"
			return 0
		fi
	fi
	local dir
	for dir in "${dirs[@]}"; do
		stop_dir "$dir"
		# Forget only the shared variables that name this directory.
		if [[ $dir == "${SORTIE_TESTREDIS_DIR:-}" ]]; then
			printf 'unset SORTIE_TEST_REDIS_URL SORTIE_TESTREDIS_DIR\n' >&3
		fi
		if [[ $dir == "${SORTIE_TESTREDIS_CLUSTER_DIR:-}" ]]; then
			printf 'unset SORTIE_TEST_REDIS_CLUSTER SORTIE_TESTREDIS_CLUSTER_DIR\n' >&3
		fi
	done
}

# ---------------------------------------------------------------- restart

# cleanup_failed_up stops a server that `up` launched but that did not
# become ready, so that no server runs unrecorded in the state file.
cleanup_failed_up() {
	local status=$?
	[[ $status -ne 0 ]] || return 0
	if [[ -n $SERVER_PID ]] && alive "$SERVER_PID"; then
		stop_mode kill "$SERVER_PID" || true
	fi
	exit "$status"
}

# check_mode MODE fails unless MODE is a shutdown mode stop_mode knows.
check_mode() {
	[[ $1 == term || $1 == kill ]] || die "MODE must be term or kill, got \"$1\""
}

# cmd_down DIR [MODE]: shut down the server(s) of DIR, leaving their files,
# their state file and so their ports reserved, for `up` or `stop` later.
cmd_down() {
	[[ $# -ge 1 && $# -le 2 ]] || usage
	local mode=${2:-term}
	check_mode "$mode"
	read_state "$1"
	local -a pids
	mapfile -t pids < <(running_pids "$STATE_DIR")
	if [[ ${#pids[@]} -eq 0 ]]; then
		log "no server of $STATE_DIR is running"
		return 0
	fi
	stop_mode "$mode" "${pids[@]}" || die "could not stop server(s) ${pids[*]}"
	log "stopped $KIND server(s) ${pids[*]} ($mode)"
}

# cmd_up DIR: start the server(s) of DIR again, on the ports in its state
# file and on the same files: each replays its append-only file, and a
# cluster's nodes find each other from their nodes.conf.
cmd_up() {
	[[ $# -eq 1 ]] || usage
	read_state "$1"
	need_bins
	trap cleanup_failed_up EXIT
	local i node status started=()
	for i in "${!NODE_PORTS[@]}"; do
		node=$STATE_DIR/node$((i + 1))
		if alive "${NODE_PIDS[i]}" && is_our_server "${NODE_PIDS[i]}" "$node"; then
			log "server ${NODE_PIDS[i]} ($node) is already running"
			continue
		fi
		# A port held a moment longer by what the stopped server leaves
		# behind frees within a second or two: try again, then give up.
		local try
		for try in 1 2 3 4 5; do
			status=0
			launch "$node" "${NODE_PORTS[i]}" "${NODE_BUSES[i]}" || status=$?
			[[ $status -eq 2 ]] || break
			log "port ${NODE_PORTS[i]} is still taken (try $try of 5)"
			sleep 0.5
		done
		case $status in
		0) ;;
		2)
			local ports=${NODE_PORTS[i]}
			[[ ${NODE_BUSES[i]} -eq 0 ]] || ports+=" or ${NODE_BUSES[i]}"
			die "port $ports was taken while the server was down"
			;;
		*) exit 1 ;;
		esac
		NODE_PIDS[i]=$SERVER_PID
		write_state "$STATE_DIR"
		SERVER_PID=
		started+=("${NODE_PIDS[i]}")
	done
	trap - EXIT
	if [[ $KIND == cluster ]]; then
		wait_cluster "$STATE_DIR" || exit 1
	fi
	[[ ${#started[@]} -eq 0 ]] ||
		log "$KIND server(s) ${started[*]} of $STATE_DIR are serving again on ports ${NODE_PORTS[*]}"
}

# cmd_restart DIR [SECS] [MODE]: a shutdown of the server(s) of DIR (term by
# default, kill for a crash), a pause of SECS seconds with no server, and a
# start on the same ports and files. The tests of what clients do when Redis
# restarts or crashes use it.
cmd_restart() {
	[[ $# -ge 1 && $# -le 3 ]] || usage
	local dir=$1 down=${2:-0} mode=${3:-term}
	[[ $down =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "SECS must be a number of seconds, got \"$down\""
	check_mode "$mode"
	cmd_down "$dir" "$mode"
	sleep "$down"
	cmd_up "$dir"
}

# ---------------------------------------------------------------- run

RUN_DIRS=()     # what `run` started, to stop however it leaves

stop_run_servers() {
	local dir
	for dir in "${RUN_DIRS[@]}"; do
		bash "$SELF" stop "$dir" >/dev/null || true
	done
	RUN_DIRS=()
}

# cannot_start WHAT says that WHAT could not be started: fatal under CI=true,
# a loud warning elsewhere, after which the Redis tests skip.
cannot_start() {
	if [[ ${CI:-} == true ]]; then
		die "could not start $1, and CI=true: failing rather than skipping the Redis tests"
	fi
	cat <<EOF

################################################################
  testredis: could not start $1 (see above).
  The Redis tests that need it will be SKIPPED. Install Redis 7+
  (sudo apt-get install redis-server) or set SORTIE_TEST_REDIS_URL
  and SORTIE_TEST_REDIS_CLUSTER.
################################################################

EOF
}

cmd_run() {
	[[ $# -ge 1 ]] || usage
	local want_server=true want_cluster=true
	if [[ -n ${SORTIE_TEST_REDIS_URL:-} ]]; then
		log "using the server in SORTIE_TEST_REDIS_URL"
		want_server=false
	fi
	if [[ -n ${SORTIE_TEST_REDIS_CLUSTER:-} ]]; then
		log "using the cluster in SORTIE_TEST_REDIS_CLUSTER"
		want_cluster=false
	fi
	if ! $want_server && ! $want_cluster; then
		exec "$@" >&3 3>&-
	fi

	# Stop what we start however we leave. On INT and TERM, bash runs the
	# trap once CMD has exited (CMD gets the same Ctrl-C from the terminal).
	trap stop_run_servers EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM

	local exports
	# Child processes, so that their traps and their exit on failure stay
	# their own.
	if $want_server; then
		if exports=$(bash "$SELF" start 3>&-); then
			eval "$exports"
			RUN_DIRS+=("$SORTIE_TESTREDIS_DIR")
			export SORTIE_TEST_REDIS_URL SORTIE_TESTREDIS_DIR
		else
			cannot_start "a Redis server"
			# With the same programs the cluster would fail the same way.
			want_cluster=false
		fi
	fi
	if $want_cluster; then
		if exports=$(bash "$SELF" start --cluster 3>&-); then
			eval "$exports"
			RUN_DIRS+=("$SORTIE_TESTREDIS_CLUSTER_DIR")
			export SORTIE_TEST_REDIS_CLUSTER SORTIE_TESTREDIS_CLUSTER_DIR
		else
			cannot_start "a Redis Cluster"
		fi
	fi

	local status=0
	"$@" >&3 3>&- || status=$?
	stop_run_servers
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
