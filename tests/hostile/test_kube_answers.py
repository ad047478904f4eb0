"""Kubernetes API answers that are not what the API sends must not crash the commands that read them."""

from __future__ import annotations

from kfchaos.cli import EXIT_INTERNAL, main
from tests.support.hostile import hostile_server, json_answer


def _no_items(method: str, path: str) -> tuple[int, dict[str, str], bytes]:
    if path.startswith("/apis/chaos-mesh.org/v1alpha1") and "/" not in path.split("v1alpha1", 1)[1].strip("/"):
        return json_answer({"kind": "APIResourceList", "groupVersion": "chaos-mesh.org/v1alpha1", "resources": []})
    return json_answer({"kind": "List", "apiVersion": "v1", "metadata": {}})  # a list with no `items`


def test_cleanup_survives_a_list_answer_without_items() -> None:
    with hostile_server(_no_items) as server:
        code = main(["cleanup", "--kube-host", server.url, "--run-id", "r1", "--timeout", "1s"])
    assert server.seen, "cleanup never asked the server: the test proves nothing"
    assert code != EXIT_INTERNAL
