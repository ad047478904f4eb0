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

bash "$(dirname "$0")/apt-install.sh" "the KFP API server" mariadb-server mariadb-client || true
if have_all; then
  exit 0
fi
if [ "${CI:-}" = "true" ]; then
  echo "kfchaos: MariaDB is required under CI but could not be installed (apt-get install mariadb-server failed)" >&2
  exit 1
fi
echo "kfchaos: MariaDB not available (need root and apt-get to install Debian's 'mariadb-server');" \
     "the KFP API server tests will be skipped" >&2
