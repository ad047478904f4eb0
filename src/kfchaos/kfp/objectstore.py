"""A run's artifacts read from KFP's object store, for backends whose API cannot serve them.

KFP 2.1.0's artifact endpoint finds an artifact only among a Workflow node's Argo outputs, which the v2 launcher
never writes (backend/src/apiserver/resource/resource_manager.go, ReadArtifact): `kfchaos run --wait` answers 404
there. The launcher stores every output artifact in the object store under the run's pipeline root, at
`<pipeline root>/<pipeline name>/<run id>/<task name>/<artifact name>` (backend/src/v2/metadata/client.go,
GenerateOutputURI for the run's root; backend/src/v2/driver/driver.go for the task's part), the root being the
`kfp-launcher` ConfigMap's defaultPipelineRoot or minio://mlpipeline/v2/artifacts (backend/src/v2/config/env.go).
This reads that object over the S3 API with the store's keys (KFP's `mlpipeline-minio-artifact` Secret holds
them), requests signed with botocore's Signature Version 4 and sent through kfchaos.netsafe (a redirect to
another origin is refused, so the keys' signature never reaches another host).
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from kfchaos import netsafe
from kfchaos.errors import KfchaosError

DEFAULT_PIPELINE_ROOT = "minio://mlpipeline/v2/artifacts"  # backend/src/v2/config/env.go, defaultPipelineRoot
SCHEMES = ("minio", "s3")


@dataclass(frozen=True)
class ObjectStore:
    endpoint: str  # the S3 API's URL, e.g. http://minio-service.kubeflow:9000 (or a port-forward of it)
    access_key: str
    secret_key: str
    region: str = "us-east-1"  # MinIO's default region; a signature names one

    def read(self, bucket: str, key: str, max_bytes: int, timeout: float = 60.0) -> bytes:
        url = f"{self.endpoint.rstrip('/')}/{urllib.parse.quote(bucket)}/{urllib.parse.quote(key)}"
        signed = AWSRequest(method="GET", url=url)
        SigV4Auth(Credentials(self.access_key, self.secret_key), "s3", self.region).add_auth(signed)
        request = urllib.request.Request(url, headers=dict(signed.headers.items()), method="GET")
        try:
            answer = netsafe.fetch(request, timeout, max_bytes)
        except urllib.error.HTTPError as exc:
            raise KfchaosError(
                f"object store {netsafe.origin_text(url)}: s3://{bucket}/{key}: HTTP {exc.code}"
            ) from None
        except (urllib.error.URLError, OSError) as exc:
            raise KfchaosError(f"object store {netsafe.origin_text(url)}: {exc}") from None
        if len(answer.body) > max_bytes:
            raise KfchaosError(f"s3://{bucket}/{key} exceeds {max_bytes} bytes")
        return answer.body


def artifact_location(pipeline_root: str, pipeline_name: str, run_id: str, task: str, artifact: str) -> tuple[str, str]:
    """(bucket, key) of a task's output artifact under the run's pipeline root."""
    parsed = urllib.parse.urlsplit(pipeline_root)
    if parsed.scheme not in SCHEMES or not parsed.netloc:
        raise KfchaosError(f"pipeline root {pipeline_root!r}: only {' and '.join(SCHEMES)} roots are read here")
    parts = [p for p in parsed.path.split("/") if p] + [pipeline_name, run_id, task, artifact]
    return parsed.netloc, "/".join(parts)
