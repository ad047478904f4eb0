"""Test helpers shared across areas: the loopback Kubernetes API server (kubeapi)."""
