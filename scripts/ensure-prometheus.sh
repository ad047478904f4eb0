#!/usr/bin/env bash
# Make sure a Prometheus server binary (and promtool) is available for the integration tests.
# Installs Debian's `prometheus` package when it can (root, apt). Where it cannot, it says so and the
# tests that need it are skipped -- except under CI=true, where a missing Prometheus fails the run.
set -euo pipefail

if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
  exit 0
fi

bash "$(dirname "$0")/apt-install.sh" "the integration tests" prometheus || true
if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
  exit 0
fi
if [ "${CI:-}" = "true" ]; then
  echo "kfchaos: Prometheus is required under CI but could not be installed (apt-get install prometheus failed)" >&2
  exit 1
fi
echo "kfchaos: Prometheus not available (need root and apt-get to install Debian's 'prometheus');" \
     "integration tests that need it will be skipped" >&2
