#!/usr/bin/env bash
# Install Debian packages for the tests, where this machine allows it: root, or password-less sudo, and apt-get.
# Usage: scripts/apt-install.sh "what they are for" package...  Exits non-zero (saying nothing more) where it
# cannot; the caller says what that means (the scripts/ensure-*.sh that call it). A package's maintainer scripts
# may try to start its service: there is no init system to start it here, which is fine (the tests start their own
# servers on loopback).
set -euo pipefail

why=$1
shift
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null || exit 1
  sudo="sudo -n"
fi
command -v apt-get >/dev/null 2>&1 || exit 1
echo "kfchaos: installing Debian's $* for $why" >&2
$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
