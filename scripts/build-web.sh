#!/usr/bin/env bash
# Builds the web dashboard (web/: TypeScript, Vite, ECharts) into web/dist, which the
# coordinator serves with --dashboard-dir web/dist. `npm ci` runs only when
# web/package-lock.json is newer than the installed node_modules.
set -euo pipefail
cd "$(dirname "$0")/../web"
if ! command -v npm >/dev/null 2>&1; then
  echo "build-web: npm not found; scripts/install-deps.sh installs nodejs and npm" >&2
  exit 1
fi
if [[ ! -f node_modules/.package-lock.json || package-lock.json -nt node_modules/.package-lock.json ]]; then
  npm ci --no-audit --no-fund
fi
npm run build
