#!/usr/bin/env bash
# Make sure a headless Chromium is available for the report's browser tests (tests/report/test_browser.py,
# tests/hostile/test_report_escaping.py: the report opened in a real browser over the DevTools protocol).
# Installs Debian's `chromium` package when it can (root, apt), as scripts/ensure-prometheus.sh does for
# Prometheus. Where it cannot, it says so and those tests are skipped -- except under CI=true, where a missing
# Chromium fails the run.
set -euo pipefail

have() { command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; }

if have; then
  exit 0
fi

install_with_apt() {
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null || return 1
    sudo="sudo -n"
  fi
  command -v apt-get >/dev/null 2>&1 || return 1
  echo "kfchaos: installing Debian's chromium package for the report's browser tests" >&2
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null || return 1
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null || return 1
}

install_with_apt || true
if have; then
  exit 0
fi
if [ "${CI:-}" = "true" ]; then
  echo "kfchaos: Chromium is required under CI but could not be installed (apt-get install chromium failed)" >&2
  exit 1
fi
echo "kfchaos: Chromium not available (need root and apt-get to install Debian's 'chromium');" \
     "the report's browser tests will be skipped" >&2
