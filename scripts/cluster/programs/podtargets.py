"""Prometheus targets for the pods of the real node, as a file_sd file (docs/cluster.md, "Prometheus").

Debian's `prometheus` package is built without Kubernetes service discovery (its build drops the discovery
mechanisms whose Go libraries Debian does not package, client-go among them: `kubernetes_sd_configs` is an unknown
field there). This process stands in for the part of it the cluster's scrape configuration uses: every few
seconds it lists the pods on the real node that ask to be scraped (annotation prometheus.io/scrape: "true", port
from prometheus.io/port, path from prometheus.io/path) and writes them to a file_sd file that Prometheus
re-reads on change (prometheus/prometheus, discovery/file). Each target carries what the example configuration's
relabelling gives (documentation/examples/prometheus-kubernetes.yml, job kubernetes-pods): `namespace`, `pod`, and
the pod's labels; a pod that is not Running with an IP is left out, as Prometheus's pod role has no address for it.

    python podtargets.py --kubeconfig FILE --node NAME --out FILE [--every SECONDS]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import ssl
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml


def _client(kubeconfig: Path) -> tuple[str, ssl.SSLContext]:
    config = yaml.safe_load(kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    user = config["users"][0]["user"]
    context = ssl.create_default_context(cafile=cluster["certificate-authority"])
    context.load_cert_chain(user["client-certificate"], user["client-key"])
    return cluster["server"], context


def targets(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found = []
    for pod in pods:
        meta, status = pod["metadata"], pod.get("status", {})
        annotations = meta.get("annotations") or {}
        if (
            annotations.get("prometheus.io/scrape") != "true"
            or status.get("phase") != "Running"
            or not status.get("podIP")
        ):
            continue
        port = annotations.get("prometheus.io/port")
        if not port:
            continue
        labels = {"namespace": meta["namespace"], "pod": meta["name"]}
        labels.update({re.sub(r"[^a-zA-Z0-9_]", "_", k): v for k, v in (meta.get("labels") or {}).items()})
        if annotations.get("prometheus.io/path"):
            labels["__metrics_path__"] = annotations["prometheus.io/path"]
        found.append({"targets": [f"{status['podIP']}:{port}"], "labels": labels})
    return sorted(found, key=lambda t: t["targets"][0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--node", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--every", type=float, default=2.0)
    args = parser.parse_args()
    server, context = _client(args.kubeconfig)
    url = f"{server}/api/v1/pods?fieldSelector=spec.nodeName%3D{args.node}"
    written = None
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10, context=context) as answer:
                text = json.dumps(targets(json.load(answer)["items"]), indent=1)
        except (OSError, ValueError) as error:
            print(f"podtargets: listing pods: {error}", flush=True)
        else:
            if text != written:
                tmp = args.out.with_suffix(".tmp")
                tmp.write_text(text)
                os.replace(tmp, args.out)  # file_sd reads whole files: never a half-written one
                written = text
        time.sleep(args.every)


if __name__ == "__main__":
    main()
