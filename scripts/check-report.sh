#!/usr/bin/env bash
# Render a run's HTML report offline in headless Chromium and save a screenshot, to check by eye (or by a
# script) that it opens without the network and shows its plots. Usage: scripts/check-report.sh REPORT.html [OUT.png]
set -euo pipefail
report="$(realpath "$1")"
out="${2:-${report%.html}.png}"
command -v chromium >/dev/null 2>&1 || { echo "check-report: chromium not found (apt-get install chromium)" >&2; exit 3; }
profile="$(mktemp -d)"
trap 'rm -rf "$profile"' EXIT
# No network for the page: every plot must be inline. These flags keep Chromium from calling home.
chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
  --disable-component-update --disable-sync --user-data-dir="$profile" --window-size=1280,2400 \
  --hide-scrollbars --screenshot="$out" "file://${report}" >/dev/null 2>&1
test -s "$out"
echo "$out"
