#!/usr/bin/env bash
# The replay benchmark's reference tools: nginx (the loopback server) and wrk (the reference client),
# from Debian packages. Idempotent: does nothing when both are installed. Exit 1 when they cannot be had.
set -euo pipefail
if command -v nginx >/dev/null 2>&1 && command -v wrk >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nginx-light wrk >/dev/null 2>&1 \
    || DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nginx wrk >/dev/null
fi
command -v nginx >/dev/null 2>&1 && command -v wrk >/dev/null 2>&1 || {
  echo "ensure-bench-tools: nginx and wrk are needed (apt-get install nginx wrk)" >&2
  exit 1
}
