#!/usr/bin/env bash
# Make sure a Prometheus server binary (and promtool) is available for the integration tests.
# Installs Debian's `prometheus` package when it can (root, apt). Where it cannot, it says so and the
# tests that need it are skipped -- except under CI=true, where a missing Prometheus fails the run.
set -euo pipefail

if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
  exit 0
fi

install_with_apt() {
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null || return 1
    sudo="sudo -n"
  fi
  command -v apt-get >/dev/null 2>&1 || return 1
  echo "kfchaos: installing Debian's prometheus package for the integration tests" >&2
  # The package's maintainer scripts try to start a service; there is none to start here, which is fine.
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null || return 1
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null || return 1
}

install_with_apt || true
if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
  exit 0
fi
if [ "${CI:-}" = "true" ]; then
  echo "kfchaos: Prometheus is required under CI but could not be installed (apt-get install prometheus failed)" >&2
  exit 1
fi
echo "kfchaos: Prometheus not available (need root and apt-get to install Debian's 'prometheus');" \
     "integration tests that need it will be skipped" >&2
