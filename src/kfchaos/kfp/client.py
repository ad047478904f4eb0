"""The KFP client side: connect, upload a pipeline version idempotently, submit a run.

Authentication is what `kfp.Client` supports: in cluster (no host: the SDK finds the service), a bearer token
(`--token` or env KFCHAOS_KFP_TOKEN, passed as `existing_token`), or a kube context (`--kube-context`).
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kfchaos import netsafe
from kfchaos.errors import KfchaosError
from kfchaos.kfp.versioning import LockEntry

TOKEN_ENV = "KFCHAOS_KFP_TOKEN"
DEFAULT_EXPERIMENT = "kfchaos"
# The identity every run executes as, drivers and launchers included (manifests/base/pipeline-runner-binding.yaml).
RUN_SERVICE_ACCOUNT = "kfchaos-runner"


@dataclass(frozen=True)
class Connection:
    host: str | None = None
    token: str | None = None
    namespace: str = "kubeflow"
    kube_context: str | None = None


def _client_class() -> type:
    """`kfp.Client` whose REST layer refuses a redirect to another origin (kfchaos.netsafe): the SDK builds its
    kfp_server_api Configuration in `Client._load_config` (kfp/client/client.py) and the generated REST client
    passes `configuration.retries` to urllib3 (kfp_server_api/rest.py). Built on first use: importing kfp
    takes a second that commands without KFP should not pay."""
    import kfp
    import kfp_server_api

    class Client(kfp.Client):
        def _load_config(self, *args: Any, **kwargs: Any) -> Any:
            config = super()._load_config(*args, **kwargs)
            config.retries = netsafe.retry()
            return config

        def get_kfp_healthz(self, sleep_duration: int = 1) -> Any:
            """The SDK's healthz check (its constructor calls it), bounded: HEALTHZ_TRIES tries a second apart,
            each request under the whole-call deadline. The SDK's own tries five times 5 s apart, so a KFP
            that answers errors held `connect` for 25 s and more."""
            _bound(self)
            for attempt in range(HEALTHZ_TRIES):
                try:
                    return self._healthz_api.healthz_service_get_healthz()
                except kfp_server_api.ApiException:
                    if attempt + 1 == HEALTHZ_TRIES:
                        raise
                    time.sleep(min(sleep_duration, 1))
            return None

    return Client


HEALTHZ_TRIES = 3


def _bound(client: Any) -> None:
    """Every API request of the client bounded as a whole (kfchaos.netsafe; kfp_server_api/rest.py keeps its
    urllib3 PoolManager as `rest_client.pool_manager`, whose pools are made on first use). Once per client."""
    if getattr(client, "_kfchaos_bounded", False):
        return
    netsafe.watch_pools(client._healthz_api.api_client.rest_client.pool_manager, netsafe.DEFAULT_DEADLINE_S)
    client._kfchaos_bounded = True


def connect(connection: Connection) -> Any:
    """A `kfp.Client` for the connection; the constructor checks /apis/v2beta1/healthz."""
    token = connection.token or os.environ.get(TOKEN_ENV) or None
    try:
        with warnings.catch_warnings():
            # "This client only works with KFP v2.0.0-beta.2 and later": true of every server we support.
            warnings.simplefilter("ignore", FutureWarning)
            client = _client_class()(
                host=connection.host,
                existing_token=token,
                namespace=connection.namespace,
                kube_context=connection.kube_context,
            )
    except Exception as exc:  # the SDK raises many kinds; all mean "cannot reach or authenticate"
        raise KfchaosError(f"cannot connect to KFP at {connection.host or '(in cluster)'}: {exc}") from None
    _bound(client)  # when the constructor made no healthz call
    return client


def _filter(key: str, value: str) -> str:
    import json

    return json.dumps({"predicates": [{"operation": "EQUALS", "key": key, "string_value": value}]})


def find_version(client: Any, pipeline_id: str, version: str) -> str | None:
    """The id of the version named `version` of the pipeline, if any."""
    response = client.list_pipeline_versions(pipeline_id, page_size=100, filter=_filter("display_name", version))
    for item in response.pipeline_versions or []:
        if item.display_name == version:
            return str(item.pipeline_version_id)
    return None


@dataclass(frozen=True)
class Uploaded:
    name: str
    version: str
    pipeline_id: str
    version_id: str
    created: bool  # False when that version already existed


def upload(client: Any, entry: LockEntry, root: Path, description: str | None = None) -> Uploaded:
    """Create the pipeline or add the version named after `entry.version`; nothing when it already exists.

    KFP names a new pipeline's first version after the pipeline, whatever you ask (kubeflow/pipelines#5881), so a
    new pipeline is uploaded, its version named by our version is added, and the auto-named one is deleted.
    """
    package = str(root / entry.file)
    if not Path(package).is_file():
        raise KfchaosError(f"{entry.file}: compiled pipeline missing; run `kfchaos compile`")
    pipeline_id = client.get_pipeline_id(entry.name)
    if pipeline_id is not None:
        existing = find_version(client, pipeline_id, entry.version)
        if existing:
            return Uploaded(entry.name, entry.version, pipeline_id, existing, created=False)
        version = client.upload_pipeline_version(
            package, pipeline_version_name=entry.version, pipeline_id=pipeline_id, description=description
        )
        return Uploaded(entry.name, entry.version, pipeline_id, version.pipeline_version_id, created=True)
    pipeline = client.upload_pipeline(package, pipeline_name=entry.name, description=description)
    pipeline_id = pipeline.pipeline_id
    version = client.upload_pipeline_version(
        package, pipeline_version_name=entry.version, pipeline_id=pipeline_id, description=description
    )
    if entry.version != entry.name:
        auto = find_version(client, pipeline_id, entry.name)
        if auto:
            client.delete_pipeline_version(pipeline_id, auto)
    return Uploaded(entry.name, entry.version, pipeline_id, version.pipeline_version_id, created=True)


def resolve_version(client: Any, name: str, version: str) -> tuple[str, str]:
    """(pipeline id, version id) of an uploaded version, or a KfchaosError saying to upload it."""
    pipeline_id = client.get_pipeline_id(name)
    version_id = find_version(client, pipeline_id, version) if pipeline_id else None
    if not pipeline_id or not version_id:
        raise KfchaosError(f"pipeline {name} version {version} is not uploaded to this KFP; run `kfchaos upload`")
    return str(pipeline_id), version_id


def experiment_id(client: Any, name: str) -> str:
    """KFP experiment (a run folder, not a kfchaos experiment) by name; created when missing."""
    return str(client.create_experiment(name).experiment_id)


def submit(
    client: Any,
    name: str,
    version: str,
    parameters: dict[str, Any],
    *,
    run_name: str,
    kfp_experiment: str = DEFAULT_EXPERIMENT,
    service_account: str = RUN_SERVICE_ACCOUNT,
) -> str:
    """Start a run of an uploaded pipeline version as `service_account` (never KFP's default identity, which
    cannot touch chaos-mesh.org); returns the run id."""
    from kfp_server_api.exceptions import ApiException

    pipeline_id, version_id = resolve_version(client, name, version)
    try:
        run = client.run_pipeline(
            experiment_id=experiment_id(client, kfp_experiment),
            job_name=run_name,
            params=parameters,
            pipeline_id=pipeline_id,
            version_id=version_id,
            service_account=service_account,
        )
    except ApiException as exc:
        # The server compiles the run and validates it (kubeflow/pipelines backend/src/apiserver/resource/
        # resource_manager.go CreateRun: argocompiler, then Argo's ValidateWorkflow); a refusal there is an
        # answer about this pipeline on this backend, not a kfchaos bug (seen on a real 2.1.0 server).
        raise KfchaosError(
            f"KFP refused the run of {name} {version}: HTTP {exc.status}: {_server_message(exc)}"
        ) from None
    return str(run.run_id)


def _server_message(exc: Any) -> str:
    """The message of a KFP API error answer ({"error", "code", "message"}), bounded; else the HTTP reason."""
    import json

    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        body = {}
    message = body.get("message") or body.get("error") if isinstance(body, dict) else None
    return str(message or exc.reason)[:2000]
