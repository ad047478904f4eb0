"""Where the cluster keeps what cannot live under a deep state folder: unix sockets and the kubelet's root.

A unix socket's path is at most 107 bytes (`sun_path` in sockaddr_un, unix(7)). containerd refuses one over 104
("unix socket path too long", seen here), and the kubelet fails to start with "Failed to create listener for
podResources endpoint ... bind: invalid argument" when `<root-dir>/pod-resources/kubelet.sock` passes it
(kubernetes/kubernetes pkg/kubelet/kubelet_getters.go: getPodResourcesDir is under getRootDir; the device-plugin
socket sits beside it); MariaDB (the KFP API server's database) listens on one too. A team's checkout is often
deep (`/home/<user>/src/<org>/<team>/<repository>`), so every socket and the kubelet's root live outside the state
folder, at a short path of their own per state folder:

- `/run/kfchaos/<key>/`: containerd's sockets and MariaDB's (removed by `down`);
- `/var/lib/kfchaos/<key>/kubelet`: the kubelet's --root-dir (pods' volumes: on disk, not /run's tmpfs, where the
  KFP launcher's copy in each task pod's emptyDir would take memory; removed by `down` after its mounts).

`<key>` is 16 hex digits of the state folder's path, so two clusters of two checkouts never share them.
A state folder that cannot work whatever its length is refused before anything starts (`state_problem`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

SOCKET_ROOT = Path("/run/kfchaos")
KUBELET_ROOT = Path("/var/lib/kfchaos")
# containerd's limit, the smallest of the programs that listen here (its error, seen on this machine).
MAX_SOCKET_PATH = 104
# The longest socket name the kubelet makes under its root (pod-resources/kubelet.sock, device-plugins/kubelet.sock).
KUBELET_SOCKETS = ("pod-resources/kubelet.sock", "device-plugins/kubelet.sock")
# Characters a state folder must not hold: overlayfs mount options are split on ',' and its lowerdir list on ':'
# (linux Documentation/filesystems/overlayfs.rst), and containerd's overlay snapshotter joins layer folders under
# the state folder into them unescaped; whitespace breaks the iptables and mount command lines built from it.
FORBIDDEN = {",": "a comma", ":": "a colon", " ": "a space", "\t": "a tab", "\n": "a newline"}


def key(state: Path) -> str:
    return hashlib.sha256(str(state.resolve()).encode()).hexdigest()[:16]


def socket_dir(state: Path) -> Path:
    return SOCKET_ROOT / key(state)


def kubelet_root(state: Path) -> Path:
    return KUBELET_ROOT / key(state) / "kubelet"


def sockets(state: Path) -> list[Path]:
    """Every unix socket the cluster's own programs listen on (the containers' sockets are theirs)."""
    here = socket_dir(state)
    listed = [here / "containerd.sock", here / "containerd.sock.ttrpc", here / "mariadb.sock"]
    return listed + [kubelet_root(state) / name for name in KUBELET_SOCKETS]


def state_problem(state: Path) -> str | None:
    """Why a cluster cannot run from this state folder, in words that say what to do; None when it can."""
    text = str(state.resolve())
    for char, name in FORBIDDEN.items():
        if char in text:
            return (
                f"the cluster's state folder {text!r} holds {name}, which overlayfs mount options and the node's "
                "command lines cannot carry: set KFCHAOS_CLUSTER_DIR to a folder without one"
            )
    too_long = [s for s in sockets(state) if len(str(s).encode()) > MAX_SOCKET_PATH]
    if too_long:  # only if SOCKET_ROOT or KUBELET_ROOT were made long: the state folder's length does not count
        return f"unix socket path over {MAX_SOCKET_PATH} bytes: {too_long[0]}"
    return None
