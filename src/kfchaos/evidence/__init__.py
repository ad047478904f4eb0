"""The OOM evidence bundle: when a run FAILs or is INCONCLUSIVE with OOM kills, restarts or KV-cache
exhaustion, the evidence a person would gather by hand, collected at the end of the run (docs/verdict.md,
"The OOM evidence bundle").

The three-stage localisation, automated: the cgroup (last terminated state and events of the pods, the
killed container's previous log, working set against the limit, cAdvisor OOM events), the GPU process
memory (DCGM framebuffer by pod; `nvidia-smi --query-compute-apps` in the serving pod, opt-in), the
framework allocator (vLLM KV-cache usage and preemptions around the kill). Each item says whether it was
collected, from which source, what it shows, and if not, why (RBAC denied, series absent, not opted in).

Collection is evidence for a person and for the knowledge base's ranking (kfchaos.knowledge): it never
changes a verdict, and a failing item never fails the run (each is bounded in time and size).

- model.py: the bundle and its items (JSON), the findings the knowledge base reads
- trigger.py: whether a run's outcome calls for the bundle, and why
- kube.py: pod status, events, previous log, exec through the Kubernetes API (and the errors' meaning)
- prom.py: the Prometheus items (memory vs limit, cgroup OOM events, DCGM, KV cache)
- collect.py: the whole collection, bounded per item
- files.py: the run folder's evidence/ (one file per item and index.json)
- runbundle.py: the bundle for one run, from the environment's pod API and Prometheus (what the concluding step
  calls, through kfchaos.steps.seams)
"""

from kfchaos.evidence.model import Bundle, Item

__all__ = ["Bundle", "Item"]
