"""kfchaos: chaos engineering as code for Kubeflow Pipelines, for teams that serve LLMs on Kubernetes."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("kfchaos")
except PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0.0.0+unknown"
