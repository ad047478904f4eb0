"""kfchaos's local control plane on loopback: see docs/cluster.md. `python -m localcluster up|down|status`."""
