#!/usr/bin/env bash
# Open a run's HTML report in headless Chromium, offline, over the DevTools protocol, and save a full-page
# screenshot; exit 1 when the page asked for anything on the network, logged an error, or drew no plot.
# Usage: scripts/check-report.sh REPORT.html [OUT.png]     (needs Debian `chromium`; run from the checkout)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: scripts/check-report.sh REPORT.html [OUT.png]" >&2; exit 3; }
report="$(realpath "$1")"
out="$(realpath -m "${2:-${report%.html}.png}")"
command -v chromium >/dev/null 2>&1 || { echo "check-report: chromium not found (apt-get install chromium)" >&2; exit 3; }
python=".venv/bin/python"
[ -x "$python" ] || python="python3"
# The flags (tests/report/browser.py) keep Chromium from calling home; every plot must be inline.
exec "$python" -m tests.report.browser "$report" "$out"
