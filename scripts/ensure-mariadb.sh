#!/usr/bin/env bash
# Make sure a MariaDB server (mariadbd and mariadb-install-db) is available for the KFP API server that the
# local control plane runs (docs/kfp-backend.md). Installs Debian's `mariadb-server` package when it can
# (root, apt), as scripts/ensure-prometheus.sh does for Prometheus. The package's own service is not used:
# scripts/cluster/localcluster/kfp.py starts a private server on loopback with its own data directory.
# Where it cannot install, it says so; under CI=true a missing MariaDB fails the run.
set -euo pipefail

have() { command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ]; }
have_all() { have && command -v mariadb-install-db >/dev/null 2>&1; }

if have_all; then
  exit 0
fi

install_with_apt() {
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null || return 1
    sudo="sudo -n"
  fi
  command -v apt-get >/dev/null 2>&1 || return 1
  echo "kfchaos: installing Debian's mariadb-server package for the KFP API server" >&2
  # Without an init system the maintainer scripts cannot start the packaged service; that is fine here.
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null || return 1
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    mariadb-server mariadb-client >/dev/null || return 1
}

install_with_apt || true
if have_all; then
  exit 0
fi
if [ "${CI:-}" = "true" ]; then
  echo "kfchaos: MariaDB is required under CI but could not be installed (apt-get install mariadb-server failed)" >&2
  exit 1
fi
echo "kfchaos: MariaDB not available (need root and apt-get to install Debian's 'mariadb-server');" \
     "the KFP API server tests will be skipped" >&2
