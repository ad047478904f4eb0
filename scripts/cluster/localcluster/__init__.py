"""kfchaos's local control plane on loopback: see docs/cluster.md. `python -m localcluster up|down|status`."""

from pathlib import Path

# The programs the cluster runs but never imports (scripts/cluster/programs/README.md): two inside the node's
# chaos-daemon image, two as host processes beside the control plane.
PROGRAMS = Path(__file__).resolve().parents[1] / "programs"
