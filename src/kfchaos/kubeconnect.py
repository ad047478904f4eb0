"""One way to build a Kubernetes API client, so that every one follows kfchaos.netsafe's rules (a redirect to
another origin is refused: the bearer token of a kubeconfig never reaches a second host), and runs a kubeconfig's
credential plugin only from the user's own kubeconfig.

A kubeconfig user may name a program to run for its credentials: `exec` (a client-go credential plugin) or
`auth-provider` (gcp runs its `cmd-path`; oidc refreshes its token against its issuer). The client library runs them
as it loads the file (kubernetes-client/python kubernetes/base/config/kube_config.py, KubeConfigLoader.
_load_authentication: _load_auth_provider_token, then _load_from_exec_plugin and its ExecProvider), so a kubeconfig
someone else wrote is a program someone else chose. kfchaos takes a kubeconfig only from the user (`--kubeconfig`,
$KUBECONFIG, ~/.kube/config), never from an experiment, a run folder or a pipeline parameter; and one that names a
plugin is loaded only when it is the user's own: the file and its folder belong to this user (or root) and no one
else may write them, and it does not lie in a kfchaos run folder (whatever its owner: a folder copied from
elsewhere). Otherwise KubeconfigRefused says which user names which plugin, and why the file is not trusted.

The client library's own loaders fill a Configuration (kubernetes-client/python kubernetes/base/config/
kube_config.py `load_kube_config(client_configuration=...)`, incluster_config.py likewise); its REST layer hands
`configuration.retries` to urllib3's PoolManager (kubernetes/client/rest.py), which is where the rule goes.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import kubernetes

from kfchaos import netsafe
from kfchaos.errors import KfchaosError, SpecError
from kfchaos.yamlsource import load_yaml, read_source

CREDENTIAL_PLUGINS = ("exec", "auth-provider")
# A kfchaos run folder holds these (kfchaos.rundir); named here, as the layers below rundir cannot import it.
RUN_FOLDER_MARKS = ("run.json", "seal.json")


class KubeconfigRefused(KfchaosError):
    """A kubeconfig that would run a credential plugin, and is not the user's own."""


def _kubeconfig_files(kubeconfig: str | None) -> list[Path]:
    """The files the client would read: the one given, else $KUBECONFIG's list, else ~/.kube/config."""
    if kubeconfig:
        return [Path(kubeconfig).expanduser()]
    listed = os.environ.get("KUBECONFIG", "")
    names = [name for name in listed.split(os.pathsep) if name] if listed else ["~/.kube/config"]
    return [Path(name).expanduser() for name in names]


def _plugins(path: Path) -> list[str]:
    """`user NAME runs exec` for each user of the file that names a credential plugin."""
    try:
        data = load_yaml(read_source(path), str(path)).data
    except (SpecError, OSError):
        return []  # unreadable or not YAML: the client's own error says so
    users = data.get("users") if isinstance(data, dict) else None
    found = []
    for entry in users if isinstance(users, list) else []:
        user = entry.get("user") if isinstance(entry, dict) else None
        for plugin in CREDENTIAL_PLUGINS:
            if isinstance(user, dict) and user.get(plugin):
                found.append(f"user {str(entry.get('name'))[:100]!r} runs {plugin}")
    return found


def _not_own(path: Path) -> str | None:
    """Why the file is not the user's own to run a program from, or None."""
    real = path.resolve()
    for folder in real.parents:
        if all((folder / mark).is_file() for mark in RUN_FOLDER_MARKS):
            return f"it lies in the kfchaos run folder {folder}"
    me = os.geteuid()
    for item, what in ((real, "the file"), (real.parent, "its folder")):
        info = item.stat()
        if info.st_uid not in (me, 0):
            return f"{what} belongs to user id {info.st_uid}"
        shared = stat.S_IMODE(info.st_mode) & 0o022
        if shared and not (item.is_dir() and info.st_mode & stat.S_ISVTX):  # a sticky folder: none can replace it
            return f"{what} may be written by others (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def check_credential_plugins(kubeconfig: str | None) -> None:
    """KubeconfigRefused when a kubeconfig the client would read names a credential plugin and is not the user's
    own (see the module's docstring)."""
    for path in _kubeconfig_files(kubeconfig):
        if not path.is_file():
            continue
        plugins = _plugins(path)
        problem = _not_own(path) if plugins else None
        if problem:
            raise KubeconfigRefused(
                f"{path}: {plugins[0]}, a program this kubeconfig chooses, and the file is not your own ({problem}): "
                "kfchaos runs a credential plugin only from a kubeconfig that you own, that no one else can write, "
                "and that lies in no run folder"
            )


def _client(configuration: Any) -> Any:
    configuration.retries = netsafe.retry()
    api_client = kubernetes.client.ApiClient(configuration)
    # Each API request bounded as a whole (connect and every read), not per read: kubernetes/client/rest.py
    # keeps its urllib3 PoolManager as `rest_client.pool_manager`, whose pools are made on first use.
    netsafe.watch_pools(api_client.rest_client.pool_manager, netsafe.DEFAULT_DEADLINE_S)
    return api_client


def api_client(
    kubeconfig: str | None = None, context: str | None = None, host: str | None = None, *, in_cluster: bool = True
) -> Any:
    """An explicit `host` (no credentials: a `kubectl proxy`), else the kubeconfig file and/or context when
    given, else in-cluster config (a pod's service account; unless `in_cluster` is False) falling back to the
    default kubeconfig. Raises
    kubernetes.config.ConfigException (or OSError) when none is usable."""
    configuration = kubernetes.client.Configuration()
    if host is not None:
        configuration.host = host
        return _client(configuration)
    if in_cluster and kubeconfig is None and context is None:
        try:
            kubernetes.config.load_incluster_config(client_configuration=configuration)
            return _client(configuration)
        except kubernetes.config.ConfigException:
            pass
    check_credential_plugins(kubeconfig)
    kubernetes.config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
    return _client(configuration)


def api_error_message(exc: kubernetes.client.ApiException) -> str:
    """The Status message of an API server's error answer (one printable line: it is the server's text), else its
    body: what the fault backend's and the lease's errors quote."""
    try:
        body = json.loads(exc.body or "{}")
        text = body.get("message") if isinstance(body, dict) else None
        return netsafe.printable(text or exc.reason)[:500]
    except (ValueError, RecursionError, TypeError):
        return netsafe.printable(exc.body or exc.reason)[:500]
