#!/usr/bin/env bash
# testbrowser.sh: Chromium and chromedriver for the dashboard's browser test
# (web/browser_test.go), which drives headless Chromium through chromedriver
# on 127.0.0.1 and stops it by process ID when it ends.
#
#   scripts/testbrowser.sh      install them when missing, if allowed
#
# It also installs axe-core (the accessibility checker the test runs in each
# page) with npm into ${XDG_CACHE_HOME:-~/.cache}/sortie/axe-core, where the
# test finds it (or at $SORTIE_AXE). axe-core is MPL-2.0: it is fetched, not
# kept in this repository.
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

# axe installs axe-core $AXE_VERSION with npm where the test looks for it.
AXE_VERSION=4.14.1
axe() {
	local dir="${XDG_CACHE_HOME:-$HOME/.cache}/sortie/axe-core"
	if [[ -f $dir/node_modules/axe-core/axe.min.js ]] &&
		grep -q "\"version\": \"$AXE_VERSION\"" "$dir/node_modules/axe-core/package.json"; then
		return 0
	fi
	command -v npm >/dev/null 2>&1 || cannot "npm is missing, so axe-core cannot be installed"
	log "installing axe-core $AXE_VERSION with npm into $dir"
	mkdir -p "$dir"
	npm install --silent --no-audit --no-fund --prefix "$dir" "axe-core@$AXE_VERSION" >&2 ||
		cannot "npm could not install axe-core $AXE_VERSION"
}

if have; then
	axe
	exit 0
fi

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
axe
