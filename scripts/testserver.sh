# testserver.sh: what scripts/testpg.sh and scripts/testredis.sh share, sourced
# by both (it runs nothing itself). Before sourcing it, a script sets LOG_NAME
# (the prefix of its log lines) and STOP_TIMEOUT (seconds from the polite
# signal to SIGKILL). It defines:
#
#   log MSG, die MSG            a line on stderr (and exit 1)
#   AS_ROOT, AS_ROOT_OK         how to run a command as root, and whether we can
#   apt_install WHAT PKG MODE BINDIR_SET
#                               install a Debian package for a test server
#   alive PID, children PID, is_our_server PID DIR, stop_pids SIG PID...,
#   port_free PORT              the processes and ports of the servers we start

# log writes to stderr even inside $(...), where fd 1 is the capture.
log() { printf '%s: %s\n' "$LOG_NAME" "$*" >&2; }
die() {
	log "$*"
	exit 1
}

# How to run a command as root: nothing when we are root, `sudo -n` when sudo
# works without a password; AS_ROOT_OK says whether either is possible.
AS_ROOT=()
AS_ROOT_OK=false
if [[ $(id -u) -eq 0 ]]; then
	AS_ROOT_OK=true
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
	AS_ROOT=(sudo -n)
	AS_ROOT_OK=true
fi

REMOVE_POLICY= # a policy-rc.d to remove if we are interrupted while installing

# apt_install WHAT PKG MODE BINDIR_SET installs the Debian package PKG (WHAT
# names it in messages: "PostgreSQL") when MODE allows: auto installs, no
# never does, dry-run prints the commands instead. BINDIR_SET is true when the
# caller was told where the binaries are, and then nothing is installed. It
# fails, saying why, when it installs nothing. The caller's cleanup removes
# $REMOVE_POLICY if it is interrupted.
apt_install() {
	local what=$1 pkg=$2 mode=$3 bindir_set=$4
	case $mode in
	auto | dry-run) ;;
	no) return 1 ;;
	*) die "the install mode must be auto, no or dry-run, got \"$mode\"" ;;
	esac
	if $bindir_set && [[ $mode != dry-run ]]; then
		# The package puts its programs elsewhere than the directory named.
		log "not installing $what: its binaries' directory is set"
		return 1
	fi
	if ! command -v apt-get >/dev/null 2>&1; then
		log "not installing $what: no apt-get on this machine"
		return 1
	fi
	if ! $AS_ROOT_OK; then
		log "not installing $what: need root or passwordless sudo"
		return 1
	fi

	# The package's postinst starts a system service where an init system
	# runs. We want no server we do not stop ourselves (and never touch one
	# we did not start), so while installing, a policy-rc.d that answers 101
	# ("action forbidden") stops invoke-rc.d and deb-systemd-invoke from
	# starting services. Only when there is none already: container images
	# often ship one that does the same.
	local policy=/usr/sbin/policy-rc.d
	# A fresh machine may be running unattended upgrades: wait for the lock.
	local lock=(-o DPkg::Lock::Timeout=300)
	local -a cmds=(
		"apt-get ${lock[*]} update -qq"
		"env DEBIAN_FRONTEND=noninteractive apt-get ${lock[*]} install -y -qq --no-install-recommends $pkg"
	)
	if [[ $mode == dry-run ]]; then
		log "dry run: would install $what with:"
		[[ -e $policy ]] || log "  ${AS_ROOT[*]:+${AS_ROOT[*]} }write $policy (exit 101), removed afterwards"
		local c
		for c in "${cmds[@]}"; do
			log "  ${AS_ROOT[*]:+${AS_ROOT[*]} }$c"
		done
		return 1
	fi

	log "$what not found; installing it with apt-get (a minute or two)"
	if [[ ! -e $policy ]]; then
		"${AS_ROOT[@]}" sh -c "printf '#!/bin/sh\nexit 101\n' >$policy && chmod 755 $policy"
		REMOVE_POLICY=$policy
	fi
	local out status=0
	out=$(mktemp "${TMPDIR:-/tmp}/sortie-apt.XXXXXX")
	# Quiet unless it fails; then the whole output explains why.
	"${AS_ROOT[@]}" apt-get "${lock[@]}" update -qq >"$out" 2>&1 &&
		"${AS_ROOT[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${lock[@]}" \
			install -y -qq --no-install-recommends "$pkg" >>"$out" 2>&1 ||
		status=$?
	if [[ -n $REMOVE_POLICY ]]; then
		"${AS_ROOT[@]}" rm -f "$REMOVE_POLICY"
		REMOVE_POLICY=
	fi
	if [[ $status -ne 0 ]]; then
		cat "$out"
		rm -f "$out"
		log "apt-get failed (exit status $status)"
		return 1
	fi
	rm -f "$out"
	log "installed $what"
}

# alive PID succeeds while PID is a live process. A zombie does not count: a
# server we started is not our child once `start` exits, and in a container
# whose PID 1 does not reap, it stays a zombie after it exits.
alive() {
	local stat
	# /proc/PID/stat is readable by all, even for another user's process,
	# which kill -0 cannot signal.
	if stat=$(cat "/proc/$1/stat" 2>/dev/null); then
		stat=${stat##*) } # the state follows the command name in parentheses
		# An explicit status: a bare return in a trap handler (cleanup) would
		# return the status from before the trap.
		if [[ ${stat:0:1} == Z ]]; then
			return 1
		fi
		return 0
	fi
	kill -0 "$1" 2>/dev/null # no /proc
}

# children PID prints the PIDs of PID's live child processes, one a line
# (none without /proc).
children() {
	local stat line fields
	for stat in /proc/[0-9]*/stat; do
		line=$(cat "$stat" 2>/dev/null) || continue
		# The state and the parent's PID follow the command name, which is in
		# parentheses and may hold spaces.
		read -r -a fields <<<"${line##*) }"
		[[ ${fields[1]:-} == "$1" && ${fields[0]:-} != Z ]] || continue
		stat=${stat#/proc/}
		printf '%s\n' "${stat%/stat}"
	done
}

# is_our_server PID DIR succeeds unless /proc shows PID is some other process
# (the server died and its PID was reused): both servers run in their data
# directory (the postmaster in its data directory, redis-server in its `dir`).
is_our_server() {
	local cwd
	cwd=$(readlink "/proc/$1/cwd" 2>/dev/null) || return 0 # cannot tell
	[[ $cwd == "$2" ]]
}

# stop_pids SIG PID... sends SIG to every PID, then SIGKILL to those still
# running after STOP_TIMEOUT seconds, and waits until they are gone.
stop_pids() {
	local sig=$1 pid i left
	shift
	for pid in "$@"; do
		kill -"$sig" "$pid" 2>/dev/null || true
	done
	for ((i = 0; i < STOP_TIMEOUT * 10; i++)); do
		left=()
		for pid in "$@"; do
			alive "$pid" && left+=("$pid")
		done
		[[ ${#left[@]} -gt 0 ]] || return 0
		set -- "${left[@]}"
		sleep 0.1
	done
	log "server(s) $* still running after ${STOP_TIMEOUT}s; sending SIGKILL"
	kill -KILL "$@" 2>/dev/null || true
	for ((i = 0; i < 50; i++)); do
		left=()
		for pid in "$@"; do
			alive "$pid" && left+=("$pid")
		done
		[[ ${#left[@]} -gt 0 ]] || return 0
		set -- "${left[@]}"
		sleep 0.1
	done
	log "server(s) $* did not exit"
	return 1
}

# port_free PORT succeeds when nothing on this machine listens on TCP PORT.
# Another process can still take it before the server binds; the caller
# notices that when the server fails to start and tries the next port.
port_free() {
	if command -v ss >/dev/null 2>&1; then
		[[ -z $(ss -Hltn "sport = :$1" 2>/dev/null) ]]
	else
		# A connection that is refused means nobody listens on 127.0.0.1.
		if (exec 4<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then
			return 1
		fi
	fi
}
