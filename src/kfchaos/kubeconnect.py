"""One way to build a Kubernetes API client, so that every one follows kfchaos.netsafe's rules (a redirect to
another origin is refused: the bearer token of a kubeconfig never reaches a second host).

The client library's own loaders fill a Configuration (kubernetes-client/python kubernetes/base/config/
kube_config.py `load_kube_config(client_configuration=...)`, incluster_config.py likewise); its REST layer hands
`configuration.retries` to urllib3's PoolManager (kubernetes/client/rest.py), which is where the rule goes.
"""

from __future__ import annotations

from typing import Any

import kubernetes

from kfchaos import netsafe


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
    kubernetes.config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
    return _client(configuration)
