"""Local fault injection for the embedded demo, in place of Chaos Mesh: the fault proxy in front of the target
(proxy), the local fault backend with the Chaos Mesh backend's interface (local_backend) and what the Kubernetes API
would say about the demo's pod (kubeview). kfchaos.steps.seams loads the last two by name under
KFCHAOS_FAULT_BACKEND=local."""
