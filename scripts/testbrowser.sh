#!/usr/bin/env bash
# testbrowser.sh: Chromium and chromedriver for the dashboard's browser test
# (web/browser_test.go), which drives headless Chromium through chromedriver
# on 127.0.0.1 and stops it by process ID when it ends.
#
#   scripts/testbrowser.sh      install them when missing, if allowed
#
# When either is missing it installs Debian's `chromium` and `chromium-driver`
# with apt-get if it may (we are root, or sudo works without a password).
# When it cannot, it says so; the browser test then skips loudly, except under
# CI=true, where this script fails (and the test would too).
set -euo pipefail

log() { printf 'testbrowser: %s\n' "$*" >&2; }

have() {
	command -v chromedriver >/dev/null 2>&1 &&
		{ command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || command -v google-chrome >/dev/null 2>&1; }
}

cannot() {
	if [[ ${CI:-} == true ]]; then
		log "$* (CI=true: failing)"
		exit 1
	fi
	log "$*; the dashboard's browser test will skip"
	exit 0
}

have && exit 0

AS_ROOT=()
if [[ $(id -u) -ne 0 ]]; then
	if sudo -n true >/dev/null 2>&1; then
		AS_ROOT=(sudo -n)
	else
		cannot "Chromium or chromedriver missing, and installing them needs root or passwordless sudo"
	fi
fi
command -v apt-get >/dev/null 2>&1 || cannot "Chromium or chromedriver missing, and there is no apt-get to install them"

log "Chromium or chromedriver not found; installing chromium and chromium-driver with apt-get (a minute)"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# A fresh machine may be running unattended upgrades: wait for the lock.
lock=(-o DPkg::Lock::Timeout=300)
status=0
"${AS_ROOT[@]}" apt-get "${lock[@]}" update -qq >"$out" 2>&1 &&
	"${AS_ROOT[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${lock[@]}" install -y -qq chromium chromium-driver >>"$out" 2>&1 ||
	status=$?
if [[ $status -ne 0 ]]; then
	cat "$out" >&2
	cannot "apt-get failed (exit status $status)"
fi
have || cannot "installed, yet chromium or chromedriver is still not on PATH"
log "installed Chromium and chromedriver"
