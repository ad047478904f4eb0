"""The real engine of this folder starts as its fixture says: the tiny model served under its name, the KV cache of
the size asked for (vLLM's own log line), and its series scraped by a real Prometheus under the pod's labels."""

from __future__ import annotations

import json
import re
import urllib.request

from kfchaos.demo.stack.vllmengine import MODEL_NAME, EngineServer
from tests.engine.conftest import KV_TOKENS, NAMESPACE, POD
from tests.support.prometheus import PrometheusServer


def test_the_shared_engine_serves_the_tiny_model_with_the_cache_asked_for(vllm_engine: EngineServer) -> None:
    with urllib.request.urlopen(f"{vllm_engine.url}/v1/models", timeout=10) as response:
        models = json.loads(response.read())
    assert [m["id"] for m in models["data"]] == [MODEL_NAME]
    assert models["data"][0]["max_model_len"] == 2048
    # vllm/v1/core/kv_cache_utils.py logs the cache it made: "CPU KV cache size: 8,192 tokens"
    found = re.search(r"KV cache size: ([\d,]+) tokens", vllm_engine.log_tail(200_000))
    assert found is not None, vllm_engine.log_tail()
    assert int(found.group(1).replace(",", "")) == KV_TOKENS


def test_prometheus_scrapes_the_engine_under_the_pods_labels(vllm_prometheus: PrometheusServer) -> None:
    vllm_prometheus.wait_for(f'vllm:kv_cache_usage_perc{{namespace="{NAMESPACE}",pod="{POD}"}}', timeout=30)
