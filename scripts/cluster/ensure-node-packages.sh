#!/usr/bin/env bash
# Make sure the Debian packages of the local cluster's real node (docs/cluster.md, "The real node") are installed:
# the container runtime (containerd, runc), the CNI plugins, what kube-proxy and chaos-daemon call (iptables,
# ipset, conntrack), what builds the node's images without a registry (mmdebstrap, umoci), and the node's
# node-exporter (its kernel's OOM kill counter, node_vmstat_oom_kill: docs/verdict.md, "OOM kills").
# Needs root and apt. Where it cannot install, it says so and exits 1: the real node cannot run without them.
set -euo pipefail

packages=(containerd runc containernetworking-plugins iptables ipset conntrack mmdebstrap umoci prometheus-node-exporter)
commands=(containerd runc ctr /usr/lib/cni/bridge iptables ipset conntrack mmdebstrap umoci prometheus-node-exporter)

have_all() {
  local c
  for c in "${commands[@]}"; do
    if [[ "$c" == /* ]]; then [[ -x "$c" ]] || return 1; else command -v "$c" >/dev/null 2>&1 || return 1; fi
  done
}

have_all && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "kfchaos: the real node needs root (and Debian's ${packages[*]}); run as root" >&2
  exit 1
fi
command -v apt-get >/dev/null 2>&1 || { echo "kfchaos: no apt-get: install ${packages[*]} yourself" >&2; exit 1; }
echo "kfchaos: installing Debian's ${packages[*]} for the local cluster's real node" >&2
DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
# containerd's maintainer scripts try to start a service; there is no init system to start it here, which is fine:
# cluster-up starts its own containerd under the cluster's state directory.
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
have_all || { echo "kfchaos: installed ${packages[*]} but a command is still missing" >&2; exit 1; }
