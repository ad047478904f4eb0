"""The Chaos Mesh CRD schemas this project is tested against, and strict validation of objects against them.

The CRDs are vendored under `kfchaos/data/chaos-mesh/crds/` (Apache-2.0, see the LICENSE and README there; the
Chaos Mesh commit they come from is in that README, `scripts/refresh-crds.sh` refreshes them). They serve
`kfchaos render --check` offline and the loopback Kubernetes API server of the tests, so both judge an object
as a real API server with these CRDs installed would under `fieldValidation=Strict`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

CRD_DIR = Path(str(resources.files("kfchaos") / "data" / "chaos-mesh" / "crds"))
CHAOS_GROUP = "chaos-mesh.org"
CHAOS_VERSION = "v1alpha1"


@functools.cache
def load_crds(crd_dir: Path = CRD_DIR) -> dict[str, dict[str, Any]]:
    """Every CRD document in `crd_dir`, by plural (`networkchaos`)."""
    crds: dict[str, dict[str, Any]] = {}
    for path in sorted(crd_dir.glob("*.yaml")):
        for document in yaml.load_all(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
            if isinstance(document, dict) and document.get("kind") == "CustomResourceDefinition":
                crds[document["spec"]["names"]["plural"]] = document
    if not crds:
        raise FileNotFoundError(f"no CRDs in {crd_dir}")
    return crds


def strict_schema(schema: Any) -> Any:
    """The schema with `additionalProperties: false` wherever an object lists `properties` and says nothing
    about others: what fieldValidation=Strict does (jsonschema would otherwise accept unknown fields)."""
    if isinstance(schema, list):
        return [strict_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: strict_schema(value) for key, value in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def _int_range(bits: int) -> Callable[[object], bool]:
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    return lambda value: not isinstance(value, int) or low <= value <= high


def _base64(value: object) -> bool:
    import base64
    import binascii

    if not isinstance(value, str):
        return True
    try:
        base64.b64decode(value, validate=True)
    except binascii.Error:
        return False
    return True


_FORMATS = jsonschema.FormatChecker(formats=())
_FORMATS.checks("int32")(_int_range(32))
_FORMATS.checks("int64")(_int_range(64))
_FORMATS.checks("byte")(_base64)


@functools.cache
def _validator(plural: str, crd_dir: Path = CRD_DIR) -> Any:
    crd = load_crds(crd_dir)[plural]
    schema = next(v for v in crd["spec"]["versions"] if v["name"] == CHAOS_VERSION)["schema"]["openAPIV3Schema"]
    return jsonschema.Draft7Validator(strict_schema(schema), format_checker=_FORMATS)


_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def validate_chaos_object(manifest: dict[str, Any], crd_dir: Path = CRD_DIR) -> list[str]:
    """Problems with a chaos-mesh.org object, as the API server would report them; [] when it is valid."""
    problems: list[str] = []
    kind = manifest.get("kind")
    plural = next((p for p, c in load_crds(crd_dir).items() if c["spec"]["names"]["kind"] == kind), None)
    if plural is None:
        return [f"kind {kind!r} is not a Chaos Mesh kind"]
    if manifest.get("apiVersion") != f"{CHAOS_GROUP}/{CHAOS_VERSION}":
        problems.append(f"apiVersion {manifest.get('apiVersion')!r} is not {CHAOS_GROUP}/{CHAOS_VERSION}")
    for error in sorted(_validator(plural, crd_dir).iter_errors(manifest), key=lambda e: list(e.absolute_path)):
        where = ".".join(str(p) for p in error.absolute_path) or "(object)"
        problems.append(f"{where}: {error.message}")
    metadata = manifest.get("metadata") or {}
    name = metadata.get("name", "")
    if not isinstance(name, str) or not name or len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        problems.append(f"metadata.name: {name!r} is not a valid DNS-1123 subdomain")
    for key, value in (metadata.get("labels") or {}).items():
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            problems.append(f"metadata.labels.{key}: {value!r} is not a valid label value")
    return problems
