"""The one container image every component runs on, built from the repository's Dockerfile.

The reference is derived from the package version so a pipeline version always names the image its code was
released in; `KFCHAOS_IMAGE` overrides it (a private registry, a locally built tag). The override changes the
compiled pipeline, so `kfchaos compile --check` in CI must run without it.
"""

from __future__ import annotations

import os

from kfchaos import __version__

DEFAULT_REPOSITORY = "ghcr.io/kfchaos/kfchaos"
IMAGE_ENV = "KFCHAOS_IMAGE"


def image_tag(version: str = __version__) -> str:
    """A valid OCI tag for a package version: '+' (PEP 440 local versions) is not allowed in tags."""
    return version.replace("+", "-")


def component_image() -> str:
    """`KFCHAOS_IMAGE` when set, else ghcr.io/kfchaos/kfchaos:<package version>."""
    override = os.environ.get(IMAGE_ENV, "").strip()
    return override or f"{DEFAULT_REPOSITORY}:{image_tag()}"
