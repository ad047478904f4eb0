"""Names of the standard series in a metrics snapshot: the keys the verdict and the report look for."""

from __future__ import annotations

OOM_KILLS = "oom_kills"  # counter: OOM kill events of the target's containers
RESTARTS = "restarts"  # counter: container restarts of the target's pods
KV_CACHE_USAGE = "kv_cache_usage"  # gauge 0..1: vLLM KV-cache usage, the highest in each step (peaks kept)
KV_CACHE_FLOOR = "kv_cache_usage_floor"  # gauge 0..1: the lowest KV-cache usage in each step (floors kept)
PREFIX_CACHE_HIT_RATE = "prefix_cache_hit_rate"  # 0..1: prompt tokens found in the prefix cache, per interval
REQUESTS_WAITING = "requests_waiting"  # gauge: vLLM queue length
REQUESTS_RUNNING = "requests_running"
PREEMPTIONS = "preemptions"  # counter: vLLM preemptions (KV cache full)
GPU_MEMORY_USED = "gpu_memory_used"  # gauge MiB: DCGM framebuffer used
GPU_MEMORY_FREE = "gpu_memory_free"
GPU_UTIL = "gpu_util"  # gauge %: DCGM GPU utilization
DEPENDENCY_PREFIX = "dependency_p99:"  # gauge seconds: dependency_p99:<dependency name>
SERVER_REQUESTS = "server_requests"  # counter: requests the server itself counts as finished (vLLM's e2e histogram)
SERVER_RESTARTS = "server_restarts"  # counter: drops of the server's request counter, one per restarted server process
