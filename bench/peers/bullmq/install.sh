#!/usr/bin/env bash
# install.sh installs the BullMQ that peerbench --peer bullmq runs, at the
# exact versions of package-lock.json, into node_modules beside this script
# (git-ignored). It needs node 20 or later and npm. Run it again after
# package-lock.json changes; peerbench refuses an install whose bullmq
# version is not the one package.json pins.
#
# Install scripts are not run (--ignore-scripts): the only package that has
# one is msgpackr-extract, an optional native speed-up of msgpackr, which
# falls back to JavaScript without it.
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	echo "install.sh: node and npm are needed (node 20 or later)" >&2
	exit 1
fi
npm ci --ignore-scripts --no-audit --no-fund
echo "installed: node $(node --version), bullmq $(node -p 'require("bullmq/package.json").version'), ioredis $(node -p 'require("ioredis/package.json").version')" >&2
