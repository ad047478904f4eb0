"""Who the demo's one pod is, as the cluster would name it: its namespace, pod name, uid and container. The demo
server labels its cluster series with them (kfchaos.demo.server.api), so does the real engine's supervisor
(kfchaos.demo.stack.enginesupervisor); the stack scopes the standard queries to them (kfchaos.demo.stack.demostack)
and the local pod view answers for them (kfchaos.demo.faults.kubeview). Plain values, no imports: whoever needs the
names does not pull in the server's HTTP stack.
"""

from __future__ import annotations

DEMO_NAMESPACE = "demo"
DEMO_POD = "demo-llm-0"
# Who this container is, as kube-state-metrics and cAdvisor would label it.
DEMO_POD_UID = "00000000-0000-4000-8000-000000000001"
DEMO_CONTAINER = "vllm"
